//! Host callbacks in stream order.
//!
//! CUDA runs a stream's host functions (`cuLaunchHostFunc`) on a driver thread that must not
//! call the CUDA API, but the host's callbacks do (a copy between devices synchronizes and
//! reads this device; a buffer released at the end of a copy may be freed). So the host
//! function only hands the callback to this device's callback thread and waits there until it
//! has run: the stream stays blocked exactly as long as the callback runs, and the callback may
//! call anything.
//!
//! While a callback runs, its stream is blocked, so a CUDA call that waits for every stream
//! (`cuMemFree`, `cuMemFreeHost`: "cudaFree causes the GPU to synchronize across all executing
//! streams") would wait for itself. The device therefore defers the frees a callback asks for
//! ([`on_callback_thread`], `crate::device`).
//!
//! Known limit (docs/plugin-guide.md, CUDA plugin): CUDA may run the host functions of all
//! streams on one driver thread, so a callback that waits for work queued behind another
//! stream's host function on the same driver thread waits forever. The runtime never does that
//! on one device; a host that waits, inside a callback, for another CUDA device's events
//! recorded behind host work can.

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use devplug_plugin_sdk::{Error, HostCallback, Logger, Result};
use parking_lot::{Condvar, Mutex};

use crate::driver::{Bound, Stream};

thread_local! {
    /// Set on every device's callback thread.
    static ON_CALLBACK_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// True on a callback thread: the stream of the callback running here is blocked until it
/// returns, so nothing here may wait for every stream.
pub(crate) fn on_callback_thread() -> bool {
    ON_CALLBACK_THREAD.with(Cell::get)
}

/// A callback handed to the callback thread, and the flag the driver thread waits on.
struct Job {
    callback: HostCallback,
    done: Arc<(Mutex<bool>, Condvar)>,
}

/// The callback thread of one device, started with the first callback.
pub(crate) struct CallbackThread {
    name: String,
    logger: Logger,
    state: Mutex<Option<(Sender<Job>, JoinHandle<()>)>>,
}

/// What the driver thread's host function receives.
struct Pending {
    callback: HostCallback,
    sender: Sender<Job>,
}

impl CallbackThread {
    pub(crate) fn new(device: &str, logger: Logger) -> CallbackThread {
        CallbackThread {
            name: format!("{}-callbacks", device.to_lowercase().replace(':', "")),
            logger,
            state: Mutex::new(None),
        }
    }

    fn sender(&self) -> Result<Sender<Job>> {
        let mut state = self.state.lock();
        if let Some((tx, _)) = state.as_ref() {
            return Ok(tx.clone());
        }
        let (tx, rx) = channel::<Job>();
        let logger = self.logger.clone();
        let thread = std::thread::Builder::new()
            .name(self.name.clone())
            .spawn(move || {
                ON_CALLBACK_THREAD.with(|c| c.set(true));
                for job in rx {
                    if catch_unwind(AssertUnwindSafe(|| job.callback.call())).is_err() {
                        logger.error("CUDA: a host callback panicked");
                    }
                    let (flag, cv) = &*job.done;
                    *flag.lock() = true;
                    cv.notify_all();
                }
            })
            .map_err(|e| {
                Error::resource_exhausted(format!("cannot start the callback thread: {e}"))
            })?;
        *state = Some((tx.clone(), thread));
        Ok(tx)
    }

    /// Enqueues `callback` on `stream`: it runs on the callback thread once the stream has done
    /// all earlier work, and later work of the stream waits until it has returned.
    pub(crate) fn enqueue(
        &self,
        b: &Bound<'_>,
        stream: &Stream,
        callback: HostCallback,
    ) -> Result<()> {
        let pending = Box::into_raw(Box::new(Pending {
            callback,
            sender: self.sender()?,
        }));
        // SAFETY: `run_on_driver_thread` takes back the box exactly once and calls no CUDA
        // function; it catches every panic.
        let r = unsafe { stream.launch_host_fn(b, run_on_driver_thread, pending.cast()) };
        if let Err(e) = r {
            // SAFETY: the driver refused the function, so it will never run: the box is ours.
            drop(unsafe { Box::from_raw(pending) });
            return Err(e.into());
        }
        Ok(())
    }

    /// Stops the thread after the callbacks already handed to it (the device synchronized
    /// first, so none is still queued in a stream).
    pub(crate) fn stop(&self) {
        let state = self.state.lock().take();
        if let Some((tx, thread)) = state {
            drop(tx);
            let _ = thread.join();
        }
    }
}

/// The host function CUDA runs in stream order: hands the callback over and waits for it.
unsafe extern "C" fn run_on_driver_thread(arg: *mut c_void) {
    // SAFETY: the box leaked by `enqueue`, handed to this function once by the driver.
    let pending = unsafe { Box::from_raw(arg.cast::<Pending>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || {
        let Pending { callback, sender } = *pending;
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let job = Job {
            callback,
            done: Arc::clone(&done),
        };
        match sender.send(job) {
            Ok(()) => {
                let (flag, cv) = &*done;
                let mut finished = flag.lock();
                while !*finished {
                    cv.wait(&mut finished);
                }
            }
            // The thread is gone (the device is being destroyed): the callback must still run
            // once, and dropping it calls it (HostCallback's contract).
            Err(returned) => drop(returned.0),
        }
    }));
}
