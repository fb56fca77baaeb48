//! Logging: what the runtime and its plugins have to say, by severity.
//!
//! Messages at or above the threshold go to the host's callback ([`set_callback`]) or, without
//! one, to standard error (`[devplug Warn] …`). The threshold is the host's ([`set_level`]) or
//! else `DEVPLUG_LOG=error|warn|info|debug|trace` (default `warn`).
//!
//! Both are process-wide, as the environment variable is: messages come from places that
//! belong to no runtime (a stream's worker, a buffer freed after its runtime, a plugin's thread),
//! so a host installs one sink for the process and each record says where it came from
//! ([`Record::source`]: `devplug`, or `plugin 'sim'` for what a plugin logs through the host
//! API). The callback runs on the thread that logs, any thread; a message logged while the
//! callback runs on that thread (the callback calling back into devplug) goes to standard error
//! instead, so a callback never re-enters itself. A panic in a Rust callback is caught and
//! reported on standard error.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

/// Severity, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed and nobody else will report it.
    Error = 1,
    /// Something was refused or dropped (a plugin that failed to load); the default threshold.
    Warn = 2,
    /// What happened, once per event worth knowing.
    Info = 3,
    /// Details for debugging.
    Debug = 4,
    /// Everything.
    Trace = 5,
}

impl Level {
    /// The level of its number (1 = `Error` … 5 = `Trace`).
    pub fn from_i32(v: i32) -> Option<Level> {
        Some(match v {
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Debug,
            5 => Level::Trace,
            _ => return None,
        })
    }
}

/// One message, as a log callback receives it.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Its severity.
    pub level: Level,
    /// Who said it: `"devplug"` for the runtime, `"plugin 'sim'"` for a plugin.
    pub source: &'a str,
    /// The text, without the level or source.
    pub message: &'a str,
}

/// A host's log sink; see the module documentation.
pub type LogCallback = Arc<dyn Fn(&Record) + Send + Sync>;

static SINK: RwLock<Option<LogCallback>> = RwLock::new(None);
/// The host's threshold; 0: `DEVPLUG_LOG`'s.
static HOST_LEVEL: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

fn env_level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("DEVPLUG_LOG").as_deref() {
        Ok("error") => Level::Error,
        Ok("info") => Level::Info,
        Ok("debug") => Level::Debug,
        Ok("trace") => Level::Trace,
        _ => Level::Warn,
    })
}

/// The threshold in force: messages of this level and more severe are logged.
pub fn level() -> Level {
    Level::from_i32(i32::from(HOST_LEVEL.load(Ordering::Relaxed))).unwrap_or_else(env_level)
}

/// Sets the threshold for the process; `None` returns to `DEVPLUG_LOG`'s.
pub fn set_level(level: Option<Level>) {
    HOST_LEVEL.store(level.map_or(0, |l| l as u8), Ordering::Relaxed);
}

/// Installs the process's log callback (`None`: standard error again) and returns the one it
/// replaces. No message logged after this returns reaches the old one; a call already in
/// progress on another thread finishes with it (it holds its own reference).
pub fn set_callback(callback: Option<LogCallback>) -> Option<LogCallback> {
    std::mem::replace(&mut *SINK.write(), callback)
}

/// True when messages of `level` are logged.
pub fn enabled(level: Level) -> bool {
    level <= self::level()
}

/// Logs `message` from the runtime.
pub fn log(level: Level, message: &str) {
    log_from(level, "devplug", message)
}

/// Logs `message` from `source` (`plugin 'sim'`).
pub fn log_from(level: Level, source: &str, message: &str) {
    if !enabled(level) {
        return;
    }
    let sink = if IN_CALLBACK.with(Cell::get) {
        None
    } else {
        SINK.read().clone()
    };
    let Some(sink) = sink else {
        if source == "devplug" {
            eprintln!("[devplug {level:?}] {message}");
        } else {
            eprintln!("[devplug {level:?}] {source}: {message}");
        }
        return;
    };
    IN_CALLBACK.with(|c| c.set(true));
    let record = Record {
        level,
        source,
        message,
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(&record)));
    IN_CALLBACK.with(|c| c.set(false));
    if r.is_err() {
        eprintln!("[devplug Error] the log callback panicked on: [{level:?}] {source}: {message}");
    }
}

/// Logs `message` from devplug at [`Level::Error`].
pub fn error(message: &str) {
    log(Level::Error, message)
}

/// Logs `message` from devplug at [`Level::Warn`].
pub fn warn(message: &str) {
    log(Level::Warn, message)
}
