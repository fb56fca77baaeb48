//! Vector instruction sets chosen at run time for the compute-bound loops.
//!
//! The core is built for the x86-64 baseline, whose widest vectors are SSE2's four f32 lanes.
//! A loop that does real arithmetic per element (`exp`, `tanh`, the softmax row, …) runs
//! several times faster with AVX2 (eight lanes) or AVX-512 (sixteen), so [`dispatch`] runs its
//! closure compiled a second and a third time, for x86-64-v3 (AVX2, FMA) and x86-64-v4
//! (AVX-512 F/BW/CD/DQ/VL), and picks the widest the CPU has, found once per process. The gemm
//! crate picks its micro-kernels the same way. Loops that only move memory gain little and are
//! left alone, which keeps the code (and the build) from tripling.
//!
//! Results are the same bit for bit at every level: Rust never contracts `a * b + c` into a
//! fused multiply-add, so the wider code does the same IEEE operations on more lanes (the
//! tests compare the levels bit for bit). `DEVPLUG_CPU_ISA=base|v3|v4` caps the level, for
//! comparing them or ruling them out; a level the CPU lacks is never used.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level, ordered from the narrowest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    /// The build's baseline (SSE2 on x86-64; any other architecture).
    Base,
    /// x86-64-v3: AVX, AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE.
    V3,
    /// x86-64-v4: v3 plus AVX-512 F, BW, CD, DQ, VL.
    V4,
}

/// The level the CPU supports capped by `DEVPLUG_CPU_ISA`, and the level it supports: found
/// once each.
static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);
static SUPPORTED: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = u8::MAX;

/// The level in `cell`, found with `find` the first time.
#[inline]
fn cached(cell: &AtomicU8, find: impl FnOnce() -> Isa) -> Isa {
    match cell.load(Ordering::Relaxed) {
        0 => Isa::Base,
        1 => Isa::V3,
        2 => Isa::V4,
        _ => {
            let level = find();
            cell.store(level as u8, Ordering::Relaxed);
            level
        }
    }
}

/// The widest level this CPU supports, capped by `DEVPLUG_CPU_ISA` (found once).
#[inline]
pub(crate) fn level() -> Isa {
    cached(&LEVEL, || {
        let cap = match std::env::var("DEVPLUG_CPU_ISA").as_deref() {
            Ok("base") => Isa::Base,
            Ok("v3") => Isa::V3,
            _ => Isa::V4,
        };
        supported().min(cap)
    })
}

/// The widest level the CPU supports (detected anew: see `SUPPORTED` for the cached one).
pub(crate) fn supported() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v3 = has!("avx")
            && has!("avx2")
            && has!("fma")
            && has!("bmi1")
            && has!("bmi2")
            && has!("f16c")
            && has!("lzcnt")
            && has!("movbe");
        let v4 = v3
            && has!("avx512f")
            && has!("avx512bw")
            && has!("avx512cd")
            && has!("avx512dq")
            && has!("avx512vl");
        if v4 {
            return Isa::V4;
        }
        if v3 {
            return Isa::V3;
        }
    }
    Isa::Base
}

/// Runs `f` compiled for [`level`]. `f` should be `#[inline(always)]` and call only
/// `#[inline(always)]` code in its loop, so that all of it is compiled at the chosen level.
#[inline(always)]
pub(crate) fn dispatch<R>(f: impl FnOnce() -> R) -> R {
    dispatch_at(level(), f)
}

/// [`dispatch`] at `isa` or the widest level the CPU supports, whichever is narrower.
#[inline(always)]
pub(crate) fn dispatch_at<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        let isa = isa.min(cached(&SUPPORTED, supported));
        if isa == Isa::V4 {
            // SAFETY: the CPU supports every feature v4 enables (checked by `supported`).
            return unsafe { x86::v4(f) };
        }
        if isa == Isa::V3 {
            // SAFETY: as above, for v3.
            return unsafe { x86::v3(f) };
        }
    }
    let _ = isa;
    f()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx,avx2,fma,bmi1,bmi2,f16c,lzcnt,movbe")]
    pub(super) unsafe fn v3<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(
        enable = "avx,avx2,fma,bmi1,bmi2,f16c,lzcnt,movbe,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
    )]
    pub(super) unsafe fn v4<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_capped_by_the_cpu() {
        assert!(Isa::Base < Isa::V3 && Isa::V3 < Isa::V4);
        assert!(level() <= supported());
        // A level above the CPU's runs at the CPU's: the closure runs either way.
        assert_eq!(dispatch_at(Isa::V4, || 7), 7);
        assert_eq!(dispatch_at(Isa::Base, || 8), 8);
    }
}
