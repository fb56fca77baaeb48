//! Kernels: implementations of an op for a device type, bound to a platform (or `ANY`), with
//! dtype constraints and a priority.
//!
//! For a device of platform P and type T the candidates are the kernels for T bound to P or
//! `ANY`; the highest priority whose constraints match wins (a platform-bound kernel before an
//! `ANY` one of equal priority). Two kernels with the same op, type, binding, overlapping dtype
//! constraints and equal priority are refused at registration, naming both sources — never a
//! late lookup error, and nothing is unregistered to make room.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::op::Attrs;
use crate::tensor::{DType, Element, Tensor};

/// Which platform's memory a kernel works on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Binding {
    /// Only devices of this platform.
    Platform(String),
    /// Any platform of the device type (only for kernels that are truly memory-agnostic).
    Any,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Binding::Platform(p) => f.write_str(p),
            Binding::Any => f.write_str("ANY"),
        }
    }
}

/// What a kernel gets: its device, inputs (on that device), outputs already allocated there
/// with the shapes the op's shape function gave, and the op's complete attributes. The kernel
/// runs on the device's default stream.
///
/// A kernel a host registers in Rust is called on the thread that runs the op, during
/// [`Runtime::run`](crate::Runtime::run); it fills every output (for instance with
/// [`Tensor::write_slice`]) or returns an error, which fails the op. (An output it leaves
/// unwritten holds whatever its memory held: zeros from the CPU device's allocator, or the
/// bytes of a tensor dropped before, since memory is reused — a bug of the kernel, never
/// uninitialized memory.) A panic in it unwinds out
/// of the run.
pub struct KernelContext<'a> {
    /// The device the kernel runs on.
    pub device: &'a Arc<Device>,
    /// The inputs, in the op's order, on `device`.
    pub inputs: &'a [Tensor],
    /// The outputs to write, allocated on `device` from the op's shape function.
    pub outputs: &'a [Tensor],
    /// The op's attributes, defaults filled in.
    pub attrs: &'a Attrs,
}

impl KernelContext<'_> {
    /// Input `i`'s elements, borrowed in place (no copy), for a kernel on a device whose
    /// memory the host may read (the CPU's). `INVALID_ARGUMENT` when there is no input `i`,
    /// it does not hold `T`s, its device's memory is not host-visible, or its memory is not
    /// aligned for `T`.
    ///
    /// # Safety
    /// Nothing writes the input's memory while the slice lives (dispatch writes only the
    /// outputs; another thread or a stream writing that tensor would race with the reads).
    /// For `bool`, every byte is 0 or 1 (as tensors devplug makes hold).
    pub unsafe fn input_slice<T: Element>(&self, i: usize) -> Result<&[T]> {
        let (p, n) = host_elements::<T>(self.inputs, "input", i)?;
        // SAFETY: `p` is aligned and non-null, and the tensor's host-visible memory holds `n`
        // initialized `T`s (host memory is zeroed or written when allocated) that stay alive
        // while `self` borrows the tensor; no one writes them meanwhile (the caller's contract).
        Ok(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// Output `i`'s elements, to write in place (no copy), for a kernel on a device whose
    /// memory the host may read (the CPU's): an output is a fresh allocation no input or other
    /// output shares. `INVALID_ARGUMENT` as for [`KernelContext::input_slice`].
    ///
    /// # Safety
    /// Nothing else reads or writes the output's memory while the slice lives: not
    /// `self.outputs[i]` (its `to_vec`, `write_slice`, a clone of it) and not a second slice
    /// of it. For `bool`, write only `false` and `true`.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn output_slice<T: Element>(&self, i: usize) -> Result<&mut [T]> {
        let (p, n) = host_elements::<T>(self.outputs, "output", i)?;
        // SAFETY: as in `input_slice`; the memory is this output's alone and the caller
        // accesses it through this slice only while it lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast_mut(), n) })
    }
}

/// Where `tensors[i]` (the kernel's `what` `i`) keeps its elements as `T`s, and how many;
/// `INVALID_ARGUMENT` when there is no such tensor, or it cannot be read so.
fn host_elements<T: Element>(
    tensors: &[Tensor],
    what: &str,
    i: usize,
) -> Result<(*const T, usize)> {
    let t = tensors.get(i).ok_or_else(|| {
        Error::invalid_argument(format!(
            "there is no {what} {i} ({} {what}s)",
            tensors.len()
        ))
    })?;
    if t.dtype() != T::DTYPE {
        return Err(Error::invalid_argument(format!(
            "{what} {i} holds {} elements, not {}",
            t.dtype(),
            T::DTYPE
        )));
    }
    let p = t.host_ptr().ok_or_else(|| {
        Error::invalid_argument(format!(
            "{what} {i} is on {}, whose memory the host cannot read",
            t.device().qualified_name()
        ))
    })?;
    let n = t.num_elements() as usize;
    if n == 0 {
        return Ok((std::ptr::NonNull::<T>::dangling().as_ptr(), 0));
    }
    let p = p.cast_const().cast::<T>();
    if p.is_null() || !p.is_aligned() {
        return Err(Error::invalid_argument(format!(
            "{what} {i}'s memory at {p:?} is not aligned for {}",
            T::DTYPE
        )));
    }
    Ok((p, n))
}

/// A kernel's code.
pub type KernelFn = Arc<dyn Fn(&KernelContext) -> Result<()> + Send + Sync>;

/// A registered kernel.
#[derive(Clone)]
pub struct KernelDef {
    /// The op it implements (`Add`, `app.Swish`): an op the runtime has.
    pub op: String,
    /// The device type it runs on (`CPU`, `GPU`).
    pub device_type: String,
    /// The platform whose devices it runs on (`Binding::Platform("HOST")` for the CPU), or
    /// any platform of the type.
    pub binding: Binding,
    /// The dtypes of the op's first type variable it accepts; empty: all.
    pub dtypes: Vec<DType>,
    /// Among kernels for the same op and device, the highest priority runs.
    pub priority: i32,
    /// Who registered it, for messages and the placement log (`built-in`, `plugin 'sim'`).
    pub source: String,
    /// The kernel's code.
    pub func: KernelFn,
}

impl fmt::Debug for KernelDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Kernel({} on {} bound to {}, priority {}, from {})",
            self.op, self.device_type, self.binding, self.priority, self.source
        )
    }
}

impl KernelDef {
    pub(crate) fn accepts(&self, dtype: Option<DType>) -> bool {
        match dtype {
            Some(d) => self.dtypes.is_empty() || self.dtypes.contains(&d),
            None => true,
        }
    }

    fn overlaps(&self, other: &KernelDef) -> bool {
        self.dtypes.is_empty()
            || other.dtypes.is_empty()
            || self.dtypes.iter().any(|d| other.dtypes.contains(d))
    }

    pub(crate) fn matches(&self, op: &str, platform: &str, device_type: &str) -> bool {
        self.op == op
            && self.device_type == device_type
            && match &self.binding {
                Binding::Any => true,
                Binding::Platform(p) => p == platform,
            }
    }
}

/// All kernels of a runtime. Lookups are cached by the dispatcher; every registration bumps
/// the generation, which invalidates those caches.
#[derive(Default)]
pub struct KernelRegistry {
    kernels: RwLock<Vec<Arc<KernelDef>>>,
    generation: AtomicU64,
}

impl KernelRegistry {
    /// Registers a kernel, or refuses it when it conflicts with one already registered. Hosts
    /// register through [`Runtime::register_kernel`](crate::Runtime::register_kernel), which
    /// also checks the op and its dtypes.
    pub(crate) fn register(&self, def: KernelDef) -> Result<()> {
        self.register_all(vec![def])
    }

    /// Registers kernels all or nothing.
    pub(crate) fn register_all(&self, defs: Vec<KernelDef>) -> Result<()> {
        let mut kernels = self.kernels.write();
        conflicts(&kernels, &defs)?;
        kernels.extend(defs.into_iter().map(Arc::new));
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Checks that `defs` could be registered (no conflict with each other or with what is
    /// registered), without registering them.
    pub fn check_all(&self, defs: &[KernelDef]) -> Result<()> {
        conflicts(&self.kernels.read(), defs)
    }

    /// Bumped by every registration.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The kernel that runs `op` on a device of `platform` / `device_type` for `dtype`.
    pub fn resolve(
        &self,
        op: &str,
        platform: &str,
        device_type: &str,
        dtype: Option<DType>,
    ) -> Option<Arc<KernelDef>> {
        self.kernels
            .read()
            .iter()
            .filter(|k| k.matches(op, platform, device_type) && k.accepts(dtype))
            .max_by_key(|k| (k.priority, matches!(k.binding, Binding::Platform(_))))
            .cloned()
    }

    /// The kernel that runs `op` there for `dtype` when `than` (the one [`resolve`] gave, or one
    /// this gave) declined the inputs: the best candidate below it.
    ///
    /// [`resolve`]: KernelRegistry::resolve
    pub fn resolve_below(
        &self,
        op: &str,
        platform: &str,
        device_type: &str,
        dtype: Option<DType>,
        than: &KernelDef,
    ) -> Option<Arc<KernelDef>> {
        let rank = |k: &KernelDef| (k.priority, matches!(k.binding, Binding::Platform(_)));
        self.kernels
            .read()
            .iter()
            .filter(|k| k.matches(op, platform, device_type) && k.accepts(dtype))
            .filter(|k| rank(k) < rank(than))
            .max_by_key(|k| rank(k))
            .cloned()
    }

    /// Where kernels for `op` exist, for error messages: `"CPU (HOST, built-in)"`, …
    pub fn locations(&self, op: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .kernels
            .read()
            .iter()
            .filter(|k| k.op == op)
            .map(|k| {
                let dtypes = if k.dtypes.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {}",
                        k.dtypes
                            .iter()
                            .map(|d| d.name())
                            .collect::<Vec<_>>()
                            .join("/")
                    )
                };
                format!(
                    "{} bound to {} ({}{dtypes})",
                    k.device_type, k.binding, k.source
                )
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Every kernel, for tools (`devplug info`) and tests.
    pub fn all(&self) -> Vec<Arc<KernelDef>> {
        self.kernels.read().clone()
    }
}

fn conflicts(existing: &[Arc<KernelDef>], defs: &[KernelDef]) -> Result<()> {
    for (i, def) in defs.iter().enumerate() {
        let clash = existing
            .iter()
            .map(|k| &**k)
            .chain(defs[..i].iter())
            .find(|k| {
                k.op == def.op
                    && k.device_type == def.device_type
                    && k.binding == def.binding
                    && k.priority == def.priority
                    && k.overlaps(def)
            });
        if let Some(k) = clash {
            let dtypes = |d: &KernelDef| {
                if d.dtypes.is_empty() {
                    "every dtype".to_string()
                } else {
                    d.dtypes
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            };
            let whose = if k.source == def.source {
                format!("another one from {}", k.source)
            } else {
                format!("the one from {}", k.source)
            };
            return Err(Error::already_exists(format!(
                "kernel for {} on {} bound to {} with priority {} from {} ({}) conflicts with {whose} \
                 ({}): same op, device type, binding, overlapping dtypes and priority; give one a \
                 different priority",
                def.op,
                def.device_type,
                def.binding,
                def.priority,
                def.source,
                dtypes(def),
                dtypes(k)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(binding: Binding, dtypes: &[DType], priority: i32, source: &str) -> KernelDef {
        KernelDef {
            op: "Add".into(),
            device_type: "GPU".into(),
            binding,
            dtypes: dtypes.to_vec(),
            priority,
            source: source.into(),
            func: Arc::new(|_| Ok(())),
        }
    }

    #[test]
    fn equal_priority_on_one_binding_is_refused_naming_both() {
        let r = KernelRegistry::default();
        r.register(k(
            Binding::Platform("SIMCUDA".into()),
            &[DType::F32],
            0,
            "plugin 'a'",
        ))
        .unwrap();
        let e = r
            .register(k(Binding::Platform("SIMCUDA".into()), &[], 0, "plugin 'b'"))
            .unwrap_err();
        assert_eq!(e.code, crate::Code::AlreadyExists);
        assert!(
            e.message.contains("plugin 'a'") && e.message.contains("plugin 'b'"),
            "{e}"
        );
        // Two kernels of one source: said so, with each one's dtypes.
        let e = r
            .register(k(
                Binding::Platform("SIMCUDA".into()),
                &[DType::F32, DType::F16],
                0,
                "plugin 'a'",
            ))
            .unwrap_err();
        assert!(
            e.message.contains(
                "from plugin 'a' (f32, f16) conflicts with another one from plugin 'a' (f32)"
            ),
            "{e}"
        );
        // other dtypes, other bindings or other priorities do not conflict
        r.register(k(
            Binding::Platform("SIMCUDA".into()),
            &[DType::F64],
            0,
            "plugin 'c'",
        ))
        .unwrap();
        r.register(k(
            Binding::Platform("SIMDML".into()),
            &[DType::F32],
            0,
            "plugin 'd'",
        ))
        .unwrap();
        r.register(k(
            Binding::Platform("SIMCUDA".into()),
            &[DType::F32],
            5,
            "plugin 'e'",
        ))
        .unwrap();
    }

    #[test]
    fn resolution_takes_the_binding_and_the_highest_priority() {
        let r = KernelRegistry::default();
        r.register(k(Binding::Platform("SIMCUDA".into()), &[], 0, "cuda"))
            .unwrap();
        r.register(k(
            Binding::Platform("SIMCUDA".into()),
            &[DType::F32],
            7,
            "cuda-f32",
        ))
        .unwrap();
        r.register(k(Binding::Any, &[], 1, "any")).unwrap();
        let src = |p: &str, d| {
            r.resolve("Add", p, "GPU", Some(d))
                .map(|k| k.source.clone())
        };
        assert_eq!(src("SIMCUDA", DType::F32).as_deref(), Some("cuda-f32"));
        assert_eq!(src("SIMCUDA", DType::I32).as_deref(), Some("any"));
        assert_eq!(
            src("SIMDML", DType::F32).as_deref(),
            Some("any"),
            "never another platform's kernel"
        );
        assert!(r.resolve("Add", "X", "NPU", Some(DType::F32)).is_none());
        assert_eq!(r.locations("Add").len(), 3);
    }
}
