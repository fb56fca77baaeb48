//! Entry points for the coverage-guided fuzz targets (`fuzz/`, feature `fuzzing`): the checks
//! of untrusted input that are private to the crate otherwise.

/// The check a plugin file gets before `dlopen` maps it ([`crate::plugin`]), on `contents` as
/// a file of `len` bytes (`len` may exceed the contents: reads past them find the end of the
/// file, as in a file that shrank while it was read).
pub fn elf_check(contents: &[u8], len: u64) -> Result<(), String> {
    crate::plugin::elf::check_contents(&mut std::io::Cursor::new(contents), len)
}
