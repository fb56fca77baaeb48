//! A graph's constants, and their copies on the devices of the nodes that take them: a
//! constant on the CPU that feeds a node on an accelerator is copied there by the first run
//! that needs it, and later runs reuse the copy (eager code would copy it on every op).

use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::device::Device;
use crate::error::Result;
use crate::placement::Reason;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

pub(crate) struct Constant {
    pub(crate) value: Tensor,
    /// One copy per other device a node taking the constant runs on; kept with the graph.
    copies: Mutex<SmallVec<[Tensor; 1]>>,
}

impl Constant {
    pub(crate) fn new(value: Tensor) -> Constant {
        Constant {
            value,
            copies: Mutex::new(SmallVec::new()),
        }
    }

    /// The constant on `device`: itself, its copy there, or a copy made now (logged, for op
    /// `op` of node `node`, as an input copied once for the graph's runs).
    pub(crate) fn on(
        &self,
        rt: &Runtime,
        device: &Arc<Device>,
        name: &str,
        op: &str,
    ) -> Result<Tensor> {
        if Arc::ptr_eq(self.value.device(), device) {
            return Ok(self.value.clone());
        }
        let mut copies = self.copies.lock();
        if let Some(t) = copies.iter().find(|t| Arc::ptr_eq(t.device(), device)) {
            return Ok(t.clone());
        }
        let copy = self.value.copy_to(device)?;
        rt.placement().note(op, device, Reason::InputCopied, || {
            format!(
                "constant '{name}' copied from {} once; later runs reuse the copy",
                self.value.device().qualified_name()
            )
        });
        copies.push(copy.clone());
        Ok(copy)
    }
}
