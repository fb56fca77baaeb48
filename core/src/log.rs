//! Logging: `DEVPLUG_LOG=error|warn|info|debug|trace` (default `warn`) to standard error.

use std::sync::OnceLock;

/// Severity, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

fn threshold() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("DEVPLUG_LOG").as_deref() {
        Ok("error") => Level::Error,
        Ok("info") => Level::Info,
        Ok("debug") => Level::Debug,
        Ok("trace") => Level::Trace,
        _ => Level::Warn,
    })
}

/// True when messages of `level` are written.
pub fn enabled(level: Level) -> bool {
    level <= threshold()
}

pub fn log(level: Level, message: &str) {
    if enabled(level) {
        eprintln!("[devplug {level:?}] {message}");
    }
}

pub fn error(message: &str) {
    log(Level::Error, message)
}

pub fn warn(message: &str) {
    log(Level::Warn, message)
}
