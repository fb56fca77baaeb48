//! Variables: persistent tensors on a device, which graphs read and assign.
//!
//! A [`Variable`] is created by [`Runtime::variable`] from an initial value. It is placed like
//! an op, with the op kind [`OpKind::Variable`]: the device the caller names, else the scopes
//! entered on the calling thread (a setter sees the variable's name and its kind, so a policy
//! such as "variables on the CPU, computation on GPU:i" is one setter), else the runtime's
//! default device. The decision is in the placement log.
//!
//! A variable always holds a tensor of its dtype and shape on its device. [`Variable::read`]
//! returns the current value (a tensor that later assignments do not change);
//! [`Variable::assign`] copies a new value onto the device and then makes it the current one,
//! so a failed assignment leaves the old value. Cloning a `Variable` clones a reference.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::scope::{OpInfo, OpKind};
use crate::tensor::{DType, Tensor};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A persistent tensor on a device (see the module documentation).
#[derive(Clone)]
pub struct Variable(Arc<Inner>);

struct Inner {
    id: u64,
    name: String,
    device: Arc<Device>,
    value: RwLock<Tensor>,
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0.value.read();
        write!(
            f,
            "Variable({} {} {:?} on {})",
            self.0.name,
            v.dtype(),
            v.shape(),
            self.0.device.qualified_name()
        )
    }
}

impl Runtime {
    /// Creates a variable named `name` holding a copy of `initial`, on `device` or where
    /// placement puts a variable of that name (see [`crate::variable`]). `INVALID_ARGUMENT`
    /// for an empty name or a device of another runtime; a setter's error fails the creation.
    pub fn variable(
        &self,
        name: &str,
        initial: &Tensor,
        device: Option<&Arc<Device>>,
    ) -> Result<Variable> {
        if name.is_empty() {
            return Err(Error::invalid_argument("variable: the name is empty"));
        }
        let info = OpInfo {
            name,
            op: "Variable",
            kind: OpKind::Variable,
        };
        let (device, reason) = crate::scope::decide(self, device, &info)
            .map_err(|e| e.context(format!("variable '{name}'")))?;
        let value = initial
            .copy_to(&device)
            .map_err(|e| e.context(format!("variable '{name}': its initial value")))?;
        self.placement()
            .note(name, &device, reason, || "variable".into());
        Ok(Variable(Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            device,
            value: RwLock::new(value),
        })))
    }
}

impl Variable {
    /// The name it was created with.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The device the variable lives on.
    pub fn device(&self) -> &Arc<Device> {
        &self.0.device
    }

    /// The dtype of its value (fixed at creation).
    pub fn dtype(&self) -> DType {
        self.0.value.read().dtype()
    }

    /// The shape of its value (fixed at creation).
    pub fn shape(&self) -> Vec<i64> {
        self.0.value.read().shape().to_vec()
    }

    /// A process-unique number (two handles of one variable share it).
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The current value: a tensor on the variable's device that later assignments leave as
    /// it is. It is the variable's tensor, not a copy (devplug never changes a tensor in place;
    /// a host that writes into its buffer through [`Tensor::buffer`] writes into the
    /// variable).
    pub fn read(&self) -> Tensor {
        self.0.value.read().clone()
    }

    /// Copies `value` onto the variable's device and makes the copy the current value.
    /// `INVALID_ARGUMENT` naming the variable when the dtype or shape differs; on any error the
    /// variable keeps its value.
    pub fn assign(&self, value: &Tensor) -> Result<()> {
        let copy = self.prepare(value)?;
        self.commit(copy);
        Ok(())
    }

    /// Checks `value` against the variable and copies it onto the device: the first half of
    /// an assignment, which may fail.
    pub(crate) fn prepare(&self, value: &Tensor) -> Result<Tensor> {
        let (dtype, shape) = {
            let v = self.0.value.read();
            (v.dtype(), v.shape().to_vec())
        };
        if value.dtype() != dtype || value.shape() != shape.as_slice() {
            return Err(Error::invalid_argument(format!(
                "variable '{}' holds {dtype} {shape:?}; cannot assign {} {:?}",
                self.0.name,
                value.dtype(),
                value.shape()
            )));
        }
        value
            .copy_to(&self.0.device)
            .map_err(|e| e.context(format!("assigning variable '{}'", self.0.name)))
    }

    /// The second half of an assignment, which cannot fail.
    pub(crate) fn commit(&self, value: Tensor) {
        let old = std::mem::replace(&mut *self.0.value.write(), value);
        // The old value's buffer returns to the pool after the lock is released.
        drop(old);
    }
}
