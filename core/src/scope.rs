//! Device scopes and device setters: the placement context an op runs under when the caller
//! names no device.
//!
//! A [`DeviceScope`] is a value. Made from a device ([`Runtime::device_scope`]) or a setter
//! function ([`Runtime::setter_scope`]), it is *entered* on a thread ([`DeviceScope::enter`],
//! exited when the returned [`ScopeGuard`] drops) and then places every op that thread runs
//! on that runtime without an explicit device. Scopes nest: the innermost decides; a setter
//! that has no opinion (`Ok(None)`) hands the decision to the scopes around it; with no scope
//! deciding, the runtime's default device (`CPU:0`) runs the op.
//!
//! [`Runtime::current_scope`] captures the whole context in force on the calling thread as one
//! scope, which can be stored and re-entered later on any thread: entered, it *replaces* the
//! context there (the scopes around it do not apply inside it), so ops run exactly as they
//! would have where it was captured. That is what a library needs to build a module under the
//! caller's placement and run it later under the same one.
//!
//! The stack is per thread and costs an op without scopes one thread-local load.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::placement::Reason;
use crate::runtime::Runtime;

/// What an op is, for a setter that places variables and computation apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// An op computing outputs from inputs: every eager op.
    Compute,
    /// The creation of a variable (a persistent tensor, [`crate::Variable`]): a setter can
    /// keep variables on one device and computation on another.
    Variable,
}

/// What a device setter is asked about.
#[derive(Clone, Copy, Debug)]
pub struct OpInfo<'a> {
    /// The op's name in the program; an eager op's is its type (`"MatMul"`).
    pub name: &'a str,
    /// The op's type (`"MatMul"`, `"vendor.op"`).
    pub op: &'a str,
    /// A computation or a variable's creation.
    pub kind: OpKind,
}

/// A device setter: the device an op should run on, `Ok(None)` for no opinion (the scopes
/// around decide), or an error, which fails the op. It runs on the thread that runs the op,
/// for every op the scope places, so it should be quick.
pub type DeviceSetter = Arc<dyn Fn(&OpInfo) -> Result<Option<Arc<Device>>> + Send + Sync>;

#[derive(Clone)]
enum Frame {
    Device(Arc<Device>),
    Setter(DeviceSetter),
}

/// A placement context: one device or setter, or a whole captured stack of them. Cheap to
/// clone, `Send` and `Sync`; see the module documentation.
#[derive(Clone)]
pub struct DeviceScope {
    runtime: u64,
    /// Outermost first.
    frames: Arc<[Frame]>,
    /// A captured context: when entered, the scopes around it do not apply.
    replaces: bool,
}

impl std::fmt::Debug for DeviceScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let frames: Vec<String> = self
            .frames
            .iter()
            .map(|fr| match fr {
                Frame::Device(d) => d.qualified_name(),
                Frame::Setter(_) => "setter".to_string(),
            })
            .collect();
        write!(f, "DeviceScope[{}]", frames.join(" > "))?;
        if self.replaces {
            f.write_str(" (captured)")?;
        }
        Ok(())
    }
}

/// One entered scope on a thread's stack.
struct Entry {
    id: u64,
    scope: DeviceScope,
}

thread_local! {
    static STACK: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

static NEXT_ENTRY: AtomicU64 = AtomicU64::new(1);

/// Keeps a scope entered on this thread; dropping it exits the scope. Not `Send`: a scope is
/// entered on one thread's stack.
#[must_use = "the scope is exited when the guard drops"]
pub struct ScopeGuard {
    id: u64,
    _not_send: PhantomData<*const ()>,
}

impl DeviceScope {
    pub(crate) fn device(runtime: u64, device: Arc<Device>) -> DeviceScope {
        DeviceScope {
            runtime,
            frames: Arc::from([Frame::Device(device)]),
            replaces: false,
        }
    }

    pub(crate) fn setter(runtime: u64, setter: DeviceSetter) -> DeviceScope {
        DeviceScope {
            runtime,
            frames: Arc::from([Frame::Setter(setter)]),
            replaces: false,
        }
    }

    /// Enters the scope on this thread, until the guard drops. Guards are meant to drop in
    /// the reverse order of entering (as Rust scopes do); one dropped early exits its own
    /// scope only.
    pub fn enter(&self) -> ScopeGuard {
        let id = NEXT_ENTRY.fetch_add(1, Ordering::Relaxed);
        STACK.with(|s| {
            s.borrow_mut().push(Entry {
                id,
                scope: self.clone(),
            })
        });
        ScopeGuard {
            id,
            _not_send: PhantomData,
        }
    }

    /// True when the scope places nothing (a capture where no scope was entered): entering it
    /// makes ops run on the runtime's default device.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

impl ScopeGuard {
    /// Whether this guard's scope is the innermost one entered on this thread.
    pub fn is_innermost(&self) -> bool {
        STACK.with(|s| s.borrow().last().is_some_and(|e| e.id == self.id))
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        // `try_with`: a guard dropped while the thread's locals are destroyed has nothing to
        // exit from.
        let _ = STACK.try_with(|s| {
            let mut s = s.borrow_mut();
            if let Some(i) = s.iter().rposition(|e| e.id == self.id) {
                // The entry's scope drops after the borrow ends: its frames may hold setters
                // whose drop runs host code.
                let entry = s.remove(i);
                drop(s);
                drop(entry);
            }
        });
    }
}

/// The context in force for `runtime` on this thread, as one scope (see
/// [`Runtime::current_scope`]).
pub(crate) fn capture(runtime: u64) -> DeviceScope {
    STACK.with(|s| {
        let s = s.borrow();
        let mut parts: Vec<&DeviceScope> = Vec::new();
        for e in s.iter().rev().filter(|e| e.scope.runtime == runtime) {
            parts.push(&e.scope);
            if e.scope.replaces {
                break;
            }
        }
        let frames: Vec<Frame> = parts
            .iter()
            .rev()
            .flat_map(|p| p.frames.iter().cloned())
            .collect();
        DeviceScope {
            runtime,
            frames: frames.into(),
            replaces: true,
        }
    })
}

/// Where the scopes entered on this thread place `op` on `rt`, and why: `None` when no scope
/// decides (the default device runs it).
#[inline]
pub(crate) fn place(rt: &Runtime, op: &str) -> Result<Option<(Arc<Device>, Reason)>> {
    place_op(
        rt,
        &OpInfo {
            name: op,
            op,
            kind: OpKind::Compute,
        },
    )
}

/// [`place`] for an op described in full: a graph node (its name in the graph) or a variable.
#[inline]
fn place_op(rt: &Runtime, info: &OpInfo) -> Result<Option<(Arc<Device>, Reason)>> {
    // The common case, no scope at all, is one thread-local load, inline in dispatch.
    if STACK.with(|s| s.borrow().is_empty()) {
        return Ok(None);
    }
    place_scoped(rt, info)
}

/// Where `info`'s op goes: `device` when given (`INVALID_ARGUMENT` for a device of another
/// runtime), else where the scopes entered on this thread place it, else the runtime's default
/// device — and why. For ops placed once and run later (graph nodes) and variables; eager
/// dispatch borrows the device instead (`dispatch::run_on`).
pub(crate) fn decide(
    rt: &Runtime,
    device: Option<&Arc<Device>>,
    info: &OpInfo,
) -> Result<(Arc<Device>, Reason)> {
    match device {
        Some(d) if !rt.owns(d) => Err(Error::invalid_argument(format!(
            "device {} is a device of another runtime",
            d.qualified_name()
        ))),
        Some(d) => Ok((d.clone(), Reason::Explicit)),
        None => {
            Ok(place_op(rt, info)?
                .unwrap_or_else(|| (rt.default_device().clone(), Reason::Default)))
        }
    }
}

#[inline(never)]
fn place_scoped(rt: &Runtime, info: &OpInfo) -> Result<Option<(Arc<Device>, Reason)>> {
    let id = rt.id();
    let op = info.name;
    // Innermost first. Each entry's scope is cloned out of the stack before a setter runs, so
    // that a setter may itself run ops, or enter and exit scopes.
    let mut depth = 0;
    loop {
        let entry = STACK.with(|s| {
            let s = s.borrow();
            s.iter()
                .rev()
                .filter(|e| e.scope.runtime == id)
                .nth(depth)
                .map(|e| e.scope.clone())
        });
        let Some(scope) = entry else {
            return Ok(None);
        };
        for frame in scope.frames.iter().rev() {
            match frame {
                Frame::Device(d) => return Ok(Some((d.clone(), Reason::Scope))),
                Frame::Setter(f) => {
                    if let Some(d) =
                        f(info).map_err(|e| e.context(format!("{op}: the device setter failed")))?
                    {
                        if !rt.owns(&d) {
                            return Err(Error::invalid_argument(format!(
                                "{op}: the device setter chose {}, a device of another runtime",
                                d.qualified_name()
                            )));
                        }
                        return Ok(Some((d, Reason::Setter)));
                    }
                }
            }
        }
        if scope.replaces {
            return Ok(None);
        }
        depth += 1;
    }
}
