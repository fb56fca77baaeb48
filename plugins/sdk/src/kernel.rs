//! Kernels (plugin ABI 1.1): a plugin implements ops for its devices.
//!
//! During init, after registering a platform, the plugin registers kernels with
//! [`Host::register_kernel`](crate::Host::register_kernel):
//!
//! ```text
//! host.register_platform(platform)?;
//! host.register_kernel(
//!     KernelSpec::new("Add", "NPU").dtypes(&[DType::F32]),
//!     |cx: &KernelContext<'_, MyDevice>| {
//!         cx.check_arity(2, 1)?;
//!         let (x, y, z) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
//!         cx.device().enqueue_add(cx.stream(), x, y, z) // work on the device's stream
//!     },
//! )?;
//! ```
//!
//! What the host guarantees when it calls a kernel (see `dpp_kernel_context_t`):
//! - the device is one of the platform the kernel is bound to, and the stream is that device's
//!   default stream; the kernel enqueues its work there (or, on a synchronous stream, does
//!   it at once);
//! - the outputs are allocated on the device, with the shapes the op's shape function gave;
//! - the memory of inputs and outputs is kept from other uses until the stream reaches the
//!   work enqueued now (later work on the same stream may reuse it: run the work in the
//!   stream's order); copy what the work needs (addresses, shapes) into it, the [`Tensor`]
//!   views are valid only during the call;
//! - the attributes are the op's, defaults filled in;
//! - (plugin ABI 1.4) scratch memory on the device, for the work enqueued now, comes from
//!   [`KernelArgs::allocate_temp`]; the host takes it back in stream order, as it does the
//!   inputs and outputs.
//!
//! A kernel that returns `Err` fails the op with the error's code and message; a kernel that
//! panics fails it with `INTERNAL` and the panic message. Neither reaches the host as an
//! unwind.
//!
//! A kernel whose launches share preparation (attributes read and checked, a variant picked
//! for the dtypes) registers it with
//! [`Host::register_kernel_with_state`](crate::Host::register_kernel_with_state) (plugin ABI
//! 1.5): its `create` gets a [`CreateArgs`] and returns the state, made once per device, input
//! dtypes and attributes, and its compute gets `&S` with the [`KernelContext`]. From an older
//! host the SDK makes the state for each launch.

use std::fmt;

use devplug_plugin_abi as abi;

use crate::device::DeviceAddr;

pub use crate::ffi::kernel::{CreateArgs, KernelArgs, KernelContext, Tensors, TensorsIter};

/// An element type (`DPP_DTYPE_*`).
///
/// A newtype over the ABI code rather than an enum, so that a dtype a newer host sends (one
/// this SDK does not know) is still a value the kernel can look at and refuse. Compare and
/// `match` against the constants.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(i32);

impl DType {
    /// 32-bit float.
    pub const F32: DType = DType(abi::DPP_DTYPE_F32);
    /// 64-bit float.
    pub const F64: DType = DType(abi::DPP_DTYPE_F64);
    /// 32-bit signed integer.
    pub const I32: DType = DType(abi::DPP_DTYPE_I32);
    /// 64-bit signed integer.
    pub const I64: DType = DType(abi::DPP_DTYPE_I64);
    /// 8-bit unsigned integer.
    pub const U8: DType = DType(abi::DPP_DTYPE_U8);
    /// Boolean: one byte holding 0 or 1.
    pub const BOOL: DType = DType(abi::DPP_DTYPE_BOOL);
    /// IEEE 754 half precision, two bytes (ABI 1.3: a host of 1.2 or older never sends it).
    pub const F16: DType = DType(abi::DPP_DTYPE_F16);
    /// bfloat16, two bytes (ABI 1.3, as `F16`).
    pub const BF16: DType = DType(abi::DPP_DTYPE_BF16);

    /// Every dtype this SDK knows.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::BOOL,
        DType::F16,
        DType::BF16,
    ];

    /// The dtype of an ABI code (any value: unknown codes are kept).
    pub const fn from_code(code: i32) -> DType {
        DType(code)
    }

    /// The ABI code (`DPP_DTYPE_*`).
    pub const fn code(self) -> i32 {
        self.0
    }

    /// Whether this SDK knows the dtype.
    pub const fn is_known(self) -> bool {
        self.size().is_some()
    }

    /// Bytes per element; `None` for a dtype this SDK does not know.
    pub const fn size(self) -> Option<usize> {
        match self.0 {
            abi::DPP_DTYPE_F32 | abi::DPP_DTYPE_I32 => Some(4),
            abi::DPP_DTYPE_F64 | abi::DPP_DTYPE_I64 => Some(8),
            abi::DPP_DTYPE_U8 | abi::DPP_DTYPE_BOOL => Some(1),
            abi::DPP_DTYPE_F16 | abi::DPP_DTYPE_BF16 => Some(2),
            _ => None,
        }
    }

    /// The name: `f32`, `f64`, `i32`, `i64`, `u8`, `bool`, `f16`, `bf16`; `unknown` otherwise.
    pub const fn name(self) -> &'static str {
        match self.0 {
            abi::DPP_DTYPE_F32 => "f32",
            abi::DPP_DTYPE_F64 => "f64",
            abi::DPP_DTYPE_I32 => "i32",
            abi::DPP_DTYPE_I64 => "i64",
            abi::DPP_DTYPE_U8 => "u8",
            abi::DPP_DTYPE_BOOL => "bool",
            abi::DPP_DTYPE_F16 => "f16",
            abi::DPP_DTYPE_BF16 => "bf16",
            _ => "unknown",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_known() {
            f.write_str(self.name())
        } else {
            write!(f, "dtype({})", self.0)
        }
    }
}

impl fmt::Debug for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a kernel is registered for (`dpp_kernel_t` without the code).
///
/// ```text
/// KernelSpec::new("Add", "GPU")                 // this plugin's one GPU platform, all dtypes
///     .dtypes(&[DType::F32, DType::F64])        // of the op's first type variable
///     .priority(10)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSpec<'a> {
    /// The op's name, e.g. `Add` (an op the runtime knows).
    pub op: &'a str,
    /// The device type the kernel runs on, e.g. `GPU`.
    pub device_type: &'a str,
    /// The platform whose memory it works on: `None` = this plugin's one platform of
    /// `device_type` (an error when it registered several); `Some(name)` = one of its
    /// platforms; `Some("ANY")` = every platform of the type (only with
    /// [`Host::register_any_kernel`](crate::Host::register_any_kernel), which devplug 0.1's
    /// host refuses).
    pub platform: Option<&'a str>,
    /// The dtypes of the op's first type variable it accepts; empty = all.
    pub dtypes: &'a [DType],
    /// Among kernels for one op, device type and binding, the highest priority wins.
    pub priority: i32,
}

impl<'a> KernelSpec<'a> {
    /// A kernel for `op` on `device_type`: the plugin's own platform, all dtypes, priority 0.
    pub const fn new(op: &'a str, device_type: &'a str) -> KernelSpec<'a> {
        KernelSpec {
            op,
            device_type,
            platform: None,
            dtypes: &[],
            priority: 0,
        }
    }

    /// Binds the kernel to platform `platform` (one of this plugin's, or `"ANY"`, which
    /// devplug 0.1's host refuses: see
    /// [`Host::register_any_kernel`](crate::Host::register_any_kernel)).
    pub const fn platform(mut self, platform: &'a str) -> KernelSpec<'a> {
        self.platform = Some(platform);
        self
    }

    /// Accepts only these dtypes of the op's first type variable.
    pub const fn dtypes(mut self, dtypes: &'a [DType]) -> KernelSpec<'a> {
        self.dtypes = dtypes;
        self
    }

    /// Sets the priority.
    pub const fn priority(mut self, priority: i32) -> KernelSpec<'a> {
        self.priority = priority;
        self
    }
}

/// A kernel's view of one input or output (`dpp_tensor_t`): dtype, shape and where its
/// elements live in the device's memory (dense, row-major). Valid during the kernel call; a
/// stream job copies what it needs (`Tensor` is `Copy`, but its shape borrows the host's).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Tensor<'a> {
    pub(crate) dtype: DType,
    pub(crate) shape: &'a [i64],
    pub(crate) addr: DeviceAddr,
    pub(crate) byte_size: u64,
}

impl<'a> Tensor<'a> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dimensions (empty for a scalar). Every dimension is ≥ 0 (checked by the SDK).
    pub fn shape(&self) -> &'a [i64] {
        self.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The address of the first element in the device's memory.
    pub fn addr(&self) -> DeviceAddr {
        self.addr
    }

    /// Bytes of the elements, as the host says.
    pub fn byte_size(&self) -> u64 {
        self.byte_size
    }

    /// The number of elements (1 for a scalar); `None` if it overflows `u64`.
    pub fn num_elements(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))
    }

    /// `num_elements() * dtype size`: the bytes the tensor should have; `None` for an
    /// unknown dtype or an overflow.
    pub fn expected_byte_size(&self) -> Option<u64> {
        self.num_elements()?.checked_mul(self.dtype.size()? as u64)
    }
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{:?} at {} ({} bytes)",
            self.dtype, self.shape, self.addr, self.byte_size
        )
    }
}
