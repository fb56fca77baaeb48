//! The placement log: every decision dispatch takes (which device, why, which kernel).
//!
//! On when `DEVPLUG_LOG_PLACEMENT=1` (written to standard error) or when the host installs a
//! callback. Costs one atomic load per op when off.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

/// Why an op ran where it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The caller named the device.
    Explicit,
    /// No device was named: the runtime's default device.
    Default,
    /// No device was named: the innermost device scope entered on the thread.
    Scope,
    /// No device was named: a device setter of a scope entered on the thread chose it.
    Setter,
    /// The device has no kernel for the op; its decomposition ran there instead.
    Decomposed,
    /// Neither a kernel nor a decomposition on the device; the op ran on the CPU.
    SoftPlaced,
    /// An input lived on another device and was copied.
    InputCopied,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::Explicit => "explicit",
            Reason::Default => "default",
            Reason::Scope => "scope",
            Reason::Setter => "setter",
            Reason::Decomposed => "decomposed",
            Reason::SoftPlaced => "soft-placed",
            Reason::InputCopied => "input copied",
        })
    }
}

/// One placement decision, as the host's callback receives it
/// ([`Runtime::set_placement_callback`](crate::Runtime::set_placement_callback)). `Display`
/// writes the line `DEVPLUG_LOG_PLACEMENT=1` prints: `MatMul on SIM:0: explicit (kernel from
/// plugin 'devplug_sim')`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementEvent {
    /// The op's type (`MatMul`), or a variable's name for a variable's placement.
    pub op: String,
    /// The device the op ran on (`SIMCUDA:0` style: platform and ordinal).
    pub device: String,
    /// Why it ran there.
    pub reason: Reason,
    /// Who provided the kernel (`built-in`, `plugin 'sim'`), the decomposition, or a note.
    pub detail: String,
}

impl fmt::Display for PlacementEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {}: {} ({})",
            self.op, self.device, self.reason, self.detail
        )
    }
}

/// A host's placement callback (see
/// [`Runtime::set_placement_callback`](crate::Runtime::set_placement_callback) for the thread
/// it runs on, calling back into the runtime, and panics).
pub type PlacementCallback = Arc<dyn Fn(&PlacementEvent) + Send + Sync>;

/// The runtime's placement log.
pub struct PlacementLog {
    enabled: AtomicBool,
    to_stderr: bool,
    callback: RwLock<Option<PlacementCallback>>,
}

impl Default for PlacementLog {
    fn default() -> Self {
        let to_stderr = std::env::var("DEVPLUG_LOG_PLACEMENT").is_ok_and(|v| env_switch(&v));
        PlacementLog {
            enabled: AtomicBool::new(to_stderr),
            to_stderr,
            callback: RwLock::new(None),
        }
    }
}

/// A switch's value from the environment: on for `1`, `true`, `yes`, `on` (any case), off for
/// `0`, `false`, `no`, `off` and empty; anything else is off, with a warning naming it.
fn env_switch(value: &str) -> bool {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => true,
        "" | "0" | "false" | "no" | "off" => false,
        _ => {
            crate::log::warn(&format!(
                "DEVPLUG_LOG_PLACEMENT={value:?} is not a switch (1, true, yes or on; 0, false, \
                 no or off): the placement log stays off"
            ));
            false
        }
    }
}

impl PlacementLog {
    /// True when a decision must be reported (check before building an event).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Installs (or, with `None`, removes) the host's callback.
    pub fn set_callback(&self, callback: Option<PlacementCallback>) {
        let on = callback.is_some() || self.to_stderr;
        *self.callback.write() = callback;
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Records that `op` runs on `device` for `reason` when the log is on; `detail` is built
    /// only then (the log costs one atomic load when off).
    #[inline]
    pub(crate) fn note(
        &self,
        op: &str,
        device: &crate::device::Device,
        reason: Reason,
        detail: impl FnOnce() -> String,
    ) {
        if self.enabled() {
            self.record(PlacementEvent {
                op: op.to_string(),
                device: device.qualified_name(),
                reason,
                detail: detail(),
            });
        }
    }

    /// Reports `event` as the runtime does (standard error and the host's callback). An event
    /// raised while this log's callback runs on this thread (an op the callback itself ran) is
    /// not passed to the callback: it would call it again, without end.
    #[doc(hidden)]
    pub fn record(&self, event: PlacementEvent) {
        if self.to_stderr {
            eprintln!("[devplug placement] {event}");
        }
        let cb = self.callback.read().clone();
        if let Some(cb) = cb {
            if let Some(_inside) = Inside::enter(self) {
                cb(&event);
            }
        }
    }
}

thread_local! {
    /// The logs whose callback runs on this thread (a callback may run ops of another
    /// runtime, whose callback may run ops of the first: each log is listed once).
    static INSIDE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks a log's callback as running on this thread until dropped (also when it panics).
struct Inside(usize);

impl Inside {
    /// `None` when `log`'s callback already runs on this thread.
    fn enter(log: &PlacementLog) -> Option<Inside> {
        let key = log as *const PlacementLog as usize;
        INSIDE.with_borrow_mut(|v| {
            if v.contains(&key) {
                None
            } else {
                v.push(key);
                Some(Inside(key))
            }
        })
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with_borrow_mut(|v| v.retain(|&k| k != self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::env_switch;

    #[test]
    fn the_environment_switch_takes_the_usual_spellings() {
        for on in ["1", "true", "TRUE", "yes", "On", " 1 "] {
            assert!(env_switch(on), "{on:?}");
        }
        for off in ["", "0", "false", "no", "OFF", "2", "enable"] {
            assert!(!env_switch(off), "{off:?}");
        }
    }
}
