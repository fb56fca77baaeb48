//! The check of a plugin file before `dlopen` maps it: any file a plugin folder may hold.
//! Refused or accepted, never a panic, never a read of a huge program header table.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The file's length as its metadata says: the contents' own, or (first byte odd) larger,
    // as for a file truncated while it is read.
    let extra = match data.first() {
        Some(b) if b & 1 == 1 => u64::from(*b) << 20,
        _ => 0,
    };
    let _ = devplug_core::fuzzing::elf_check(data, data.len() as u64 + extra);
});
