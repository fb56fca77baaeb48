//! Checks of a plugin file before `dlopen` maps it: a truncated library (a stale copy, an
//! interrupted install) would be mapped past the end of the file, and the first touch of a
//! missing page kills the process with SIGBUS; a FIFO would block the open forever; an entry
//! symbol that is data (a Rust `static`) would be called as a function. The loader refuses
//! such a file instead.

use std::io::Read;
use std::path::Path;

/// Checks that `path` is an ELF file whose header, program headers and loadable segments lie
/// inside the file. Returns why not, when not. Non-ELF files are left to the dynamic loader,
/// which refuses them with its own message.
pub(crate) fn check(path: &Path) -> Result<(), String> {
    // Before the open, which would block on a FIFO until a writer came.
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read the file: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut f = std::fs::File::open(path).map_err(|e| format!("cannot open the file: {e}"))?;
    let len = f
        .metadata()
        .map_err(|e| format!("cannot read the file's size: {e}"))?
        .len();
    check_contents(&mut f, len)
}

/// The most program header bytes a library is believed to have: far more than any real one
/// (a few dozen entries of 56 bytes), and little enough to read without a second thought.
const MAX_PROGRAM_HEADERS_BYTES: u64 = 1 << 20;

/// [`check`] of the contents `f` (of `len` bytes).
pub(crate) fn check_contents(f: &mut (impl Read + std::io::Seek), len: u64) -> Result<(), String> {
    let mut head = [0u8; 64];
    let n = read_up_to(f, &mut head).map_err(|e| format!("cannot read the file: {e}"))?;
    if n < 4 || head[..4] != *b"\x7fELF" {
        return Ok(());
    }
    let class64 = match head.get(4) {
        Some(1) => false,
        Some(2) => true,
        _ => return Err("the ELF header has an unknown class".into()),
    };
    let little = match head.get(5) {
        Some(1) => true,
        Some(2) => false,
        _ => return Err("the ELF header has an unknown byte order".into()),
    };
    let header_len = if class64 { 64 } else { 52 };
    if n < header_len {
        // Too short for a header: the dynamic loader says so itself without mapping anything.
        return Ok(());
    }
    let e = Endian { little };
    let (u16_at, u32_at, u64_at) = (|b, o| e.u16(b, o), |b, o| e.u32(b, o), |b, o| e.u64(b, o));
    let machine = u16_at(&head, 18);
    if let Some(host) = host_machine() {
        if machine != host {
            return Err(format!(
                "the library is built for another architecture (ELF machine {machine}; this host is {host})"
            ));
        }
    }
    let (phoff, phentsize, phnum) = if class64 {
        (u64_at(&head, 32), u16_at(&head, 54), u16_at(&head, 56))
    } else {
        (u32_at(&head, 28), u16_at(&head, 42), u16_at(&head, 44))
    };
    let min_ph = if class64 { 56 } else { 32 };
    if phnum == 0 {
        return Err("the ELF file has no program headers".into());
    }
    if phentsize < min_ph {
        return Err(format!(
            "the ELF program header size {phentsize} is too small"
        ));
    }
    let table_end = phentsize
        .checked_mul(phnum)
        .and_then(|s| s.checked_add(phoff));
    match table_end {
        Some(end) if end <= len => {}
        _ => {
            return Err(format!(
                "the file is truncated: {len} bytes, but its program headers end past that"
            ))
        }
    }
    if phentsize * phnum > MAX_PROGRAM_HEADERS_BYTES {
        return Err(format!(
            "the ELF program headers are implausibly large ({phnum} of {phentsize} bytes)"
        ));
    }
    let table_len = (phentsize * phnum) as usize;
    let mut table = vec![0u8; table_len];
    use std::io::SeekFrom;
    f.seek(SeekFrom::Start(phoff))
        .map_err(|e| format!("cannot read the program headers: {e}"))?;
    f.read_exact(&mut table)
        .map_err(|e| format!("cannot read the program headers: {e}"))?;
    for i in 0..phnum as usize {
        let ph = &table[i * phentsize as usize..];
        const PT_LOAD: u64 = 1;
        if u32_at(ph, 0) != PT_LOAD {
            continue;
        }
        let (offset, filesz) = if class64 {
            (u64_at(ph, 8), u64_at(ph, 32))
        } else {
            (u32_at(ph, 4), u32_at(ph, 16))
        };
        match offset.checked_add(filesz) {
            Some(end) if end <= len => {}
            _ => {
                return Err(format!(
                "the file is truncated: {len} bytes, but loadable segment {i} needs bytes up to {}",
                offset.saturating_add(filesz)
            ))
            }
        }
    }
    Ok(())
}

/// Reads an ELF file's integers in its byte order (offsets are checked by the caller).
#[derive(Clone, Copy)]
struct Endian {
    little: bool,
}

impl Endian {
    fn u16(self, b: &[u8], o: usize) -> u64 {
        let v = [b[o], b[o + 1]];
        u64::from(if self.little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        })
    }

    fn u32(self, b: &[u8], o: usize) -> u64 {
        let v = [b[o], b[o + 1], b[o + 2], b[o + 3]];
        u64::from(if self.little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        })
    }

    fn u64(self, b: &[u8], o: usize) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[o..o + 8]);
        if self.little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    }
}

/// What a dynamic symbol of a library is, by its ELF type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SymbolKind {
    /// `STT_FUNC` or `STT_GNU_IFUNC`: code.
    Function,
    /// `STT_OBJECT`, `STT_TLS` or `STT_COMMON`: data.
    Data,
    /// Another type (`STT_NOTYPE`, …).
    Other,
}

/// The most section header bytes, and the largest symbol or string table, read to find a
/// symbol's type: far beyond any real plugin, little enough to read at once.
const MAX_TABLE_BYTES: u64 = 64 << 20;

/// The kind of the dynamic symbol `name` defined in the ELF file `path` (from its `.dynsym`
/// section); `None` when it cannot be told (no section headers, no such symbol, not ELF, an
/// unreadable or implausible table): best effort, never an error of its own.
pub(crate) fn symbol_kind(path: &Path, name: &str) -> Option<SymbolKind> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = [0u8; 64];
    let n = read_up_to(&mut f, &mut head).ok()?;
    if n < 52 || head[..4] != *b"\x7fELF" {
        return None;
    }
    let class64 = head[4] == 2;
    let e = Endian {
        little: head[5] == 1,
    };
    if class64 && n < 64 {
        return None;
    }
    let (shoff, shentsize, shnum) = if class64 {
        (e.u64(&head, 40), e.u16(&head, 58), e.u16(&head, 60))
    } else {
        (e.u32(&head, 32), e.u16(&head, 46), e.u16(&head, 48))
    };
    let min_sh = if class64 { 64 } else { 40 };
    let table_len = shentsize.checked_mul(shnum)?;
    if shentsize < min_sh || table_len > MAX_TABLE_BYTES || shoff.checked_add(table_len)? > len {
        return None;
    }
    let mut read_at = |offset: u64, size: u64| -> Option<Vec<u8>> {
        if size > MAX_TABLE_BYTES || offset.checked_add(size)? > len {
            return None;
        }
        let mut buf = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(offset)).ok()?;
        f.read_exact(&mut buf).ok()?;
        Some(buf)
    };
    let sections = read_at(shoff, table_len)?;
    // (type, offset, size, link) of section `i`.
    let section = |i: u64| -> Option<(u64, u64, u64, u64)> {
        let at = usize::try_from(i.checked_mul(shentsize)?).ok()?;
        let h = sections.get(at..at + min_sh as usize)?;
        Some(if class64 {
            (e.u32(h, 4), e.u64(h, 24), e.u64(h, 32), e.u32(h, 40))
        } else {
            (e.u32(h, 4), e.u32(h, 16), e.u32(h, 20), e.u32(h, 24))
        })
    };
    const SHT_DYNSYM: u64 = 11;
    let (_, sym_off, sym_size, link) = (0..shnum)
        .filter_map(section)
        .find(|(ty, ..)| *ty == SHT_DYNSYM)?;
    let (_, str_off, str_size, _) = section(link)?;
    let symbols = read_at(sym_off, sym_size)?;
    let strings = read_at(str_off, str_size)?;
    let sym_len = if class64 { 24 } else { 16 };
    symbols.chunks_exact(sym_len).find_map(|sym| {
        let name_at = e.u32(sym, 0) as usize;
        let info = if class64 { sym[4] } else { sym[12] };
        let rest = strings.get(name_at..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        if &rest[..end] != name.as_bytes() {
            return None;
        }
        // A defined symbol only (section index not SHN_UNDEF).
        let shndx = if class64 {
            e.u16(sym, 6)
        } else {
            e.u16(sym, 14)
        };
        if shndx == 0 {
            return None;
        }
        Some(match info & 0xf {
            2 | 10 => SymbolKind::Function,
            1 | 5 | 6 => SymbolKind::Data,
            _ => SymbolKind::Other,
        })
    })
}

/// The ELF machine number of the architecture the host runs on.
fn host_machine() -> Option<u64> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        "x86" => Some(3),
        "arm" => Some(40),
        "riscv64" => Some(243),
        "powerpc64" => Some(21),
        "s390x" => Some(22),
        _ => None,
    }
}

fn read_up_to(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library: a real shared library on every machine the tests run on.
    fn libc() -> &'static Path {
        [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .expect("a libc")
    }

    #[test]
    fn a_real_library_passes_and_a_truncated_copy_is_refused() {
        let libc = libc();
        check(libc).unwrap();
        let bytes = std::fs::read(libc).unwrap();
        check_contents(&mut std::io::Cursor::new(&bytes), bytes.len() as u64).unwrap();
        let dir = std::env::temp_dir().join(format!("devplug-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cut = dir.join("libcut.so");
        std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
        let why = check(&cut).unwrap_err();
        assert!(why.contains("truncated"), "{why}");
        std::fs::write(&cut, &bytes[..40]).unwrap();
        check(&cut).unwrap(); // left to dlopen, which refuses it without mapping anything
        std::fs::write(&cut, b"not elf at all").unwrap();
        check(&cut).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn libc_head() -> Vec<u8> {
        let mut head = std::fs::read(libc()).unwrap();
        head.truncate(4096); // the ELF header and the program headers
        head
    }

    /// Malformed headers (flipped bits, lengths and offsets set to edge values, cuts, inserted
    /// and repeated bytes) are refused with a reason or left to the dynamic loader: never a
    /// panic, an overflow or a huge allocation. The file's length is varied too (the segments
    /// of a real library lie past a 4 KiB head: a longer length lets some pass).
    #[test]
    fn mutated_headers_are_refused_or_left_to_the_loader() {
        let head = libc_head();
        let mut m = crate::testing::Mutator::new(0x5eed_e1f0);
        let (mut refused, mut passed) = (0, 0);
        for _ in 0..FUZZ_RUNS {
            let bytes = m.mutate(&head);
            let len = match m.below(3) {
                0 => bytes.len() as u64,
                1 => m.next() >> m.below(64),
                _ => u64::MAX,
            };
            match check_contents(&mut std::io::Cursor::new(&bytes), len) {
                Ok(()) => passed += 1,
                Err(why) => {
                    assert!(!why.is_empty());
                    refused += 1;
                }
            }
        }
        assert!(
            refused > FUZZ_RUNS / 10 && passed > 0,
            "{refused} refused, {passed} passed"
        );
    }

    /// A FIFO (or a directory) is refused before it is opened: opening a FIFO for reading
    /// blocks until a writer comes, which would hang the load.
    #[test]
    fn what_is_not_a_regular_file_is_refused_unopened() {
        let dir = std::env::temp_dir().join(format!("devplug-elf-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("libfifo.so");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(check(&fifo).unwrap_err(), "not a regular file");
        assert_eq!(check(&dir).unwrap_err(), "not a regular file");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The kind of a library's dynamic symbols: libc's `malloc` is a function, its `environ`
    /// data; a name it does not define, and a file that is not ELF, tell nothing.
    #[test]
    fn dynamic_symbols_are_told_functions_or_data() {
        assert_eq!(symbol_kind(libc(), "malloc"), Some(SymbolKind::Function));
        assert_eq!(symbol_kind(libc(), "environ"), Some(SymbolKind::Data));
        assert_eq!(symbol_kind(libc(), "devplug_plugin_entry"), None);
        assert_eq!(symbol_kind(Path::new("/proc/self/status"), "malloc"), None);
    }

    /// Inputs per fuzz target (reported in docs/reliability.md).
    const FUZZ_RUNS: usize = 20_000;

    /// A program header table within the file but absurdly large is refused before it is read.
    #[test]
    fn a_huge_program_header_table_is_refused_unread() {
        let mut head = libc_head();
        head[54..56].copy_from_slice(&0xffffu16.to_le_bytes()); // e_phentsize
        head[56..58].copy_from_slice(&0xffffu16.to_le_bytes()); // e_phnum
        let why = check_contents(&mut std::io::Cursor::new(&head), u64::MAX).unwrap_err();
        assert!(why.contains("implausibly large"), "{why}");
    }
}
