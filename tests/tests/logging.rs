//! The log as a Rust host uses it (`devplug_core::log`): a callback receives the runtime's
//! warning and a plugin's message with their sources; the level filters; a callback that logs
//! (through devplug) is not re-entered; one that panics does not take the process down. The log
//! is process-wide, so this file holds one test: nothing else in its process logs meanwhile.

use std::sync::{Arc, Mutex};

use devplug_core::log::{self, Level, Record};
use devplug_core::Runtime;
use devplug_tests::{options, plugin_path};

type Seen = Arc<Mutex<Vec<(Level, String, String)>>>;

fn collect(seen: &Seen) -> log::LogCallback {
    let s = seen.clone();
    Arc::new(move |r: &Record| {
        s.lock()
            .unwrap()
            .push((r.level, r.source.to_string(), r.message.to_string()))
    })
}

#[test]
fn the_log_reaches_the_hosts_callback_at_its_level() {
    let rt = Runtime::new(options()).unwrap();
    let seen: Seen = Arc::default();
    log::set_level(Some(Level::Warn));
    assert!(log::set_callback(Some(collect(&seen))).is_none());

    // An explicit load's failure is the caller's error: logged at Info, below this level.
    assert!(rt
        .load_plugin("/no/such/dir/libexplicit_rs.so", &[])
        .is_err());
    assert!(seen.lock().unwrap().is_empty());

    // The runtime's warning: a plugin a search path names fails to load.
    assert!(rt
        .load_search_path("/no/such/dir/libmissing_rs.so")
        .is_empty());
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].0, s[0].1.as_str()), (Level::Warn, "devplug"));
        assert!(s[0].2.contains("libmissing_rs.so"), "{s:?}");
    }
    seen.lock().unwrap().clear();

    // A plugin's message, with the plugin as its source, at Info; and an explicit load's
    // failure, from devplug, at Info.
    log::set_level(Some(Level::Info));
    assert!(log::enabled(Level::Info) && !log::enabled(Level::Debug));
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    assert!(rt
        .load_plugin("/no/such/dir/libexplicit_rs.so", &[])
        .is_err());
    {
        let s = seen.lock().unwrap();
        assert!(
            s.iter().any(|(l, src, m)| *l == Level::Info
                && src == "devplug"
                && m.contains("libexplicit_rs.so")),
            "{s:?}"
        );
        assert!(
            s.iter().any(|(l, src, m)| *l == Level::Info
                && src.starts_with("plugin '")
                && m.contains("SIM: platform SIM")),
            "{s:?}"
        );
    }
    seen.lock().unwrap().clear();

    // Below the level: nothing.
    log::set_level(Some(Level::Error));
    assert!(rt
        .load_search_path("/no/such/dir/libmissing_rs.so")
        .is_empty());
    assert!(seen.lock().unwrap().is_empty());
    log::set_level(Some(Level::Warn));

    // A callback that logs through devplug is not re-entered: its own message goes to
    // standard error.
    let calls = Arc::new(Mutex::new(0));
    let (c, rt2) = (calls.clone(), Arc::new(Runtime::new(options()).unwrap()));
    let rt3 = rt2.clone();
    let old = log::set_callback(Some(Arc::new(move |_: &Record| {
        *c.lock().unwrap() += 1;
        let _ = rt3.load_search_path("/no/such/dir/libinner_rs.so");
    })));
    assert!(old.is_some());
    assert!(rt
        .load_search_path("/no/such/dir/libouter_rs.so")
        .is_empty());
    assert_eq!(*calls.lock().unwrap(), 1);

    // A panicking callback is caught; the load still reports its own error.
    log::set_callback(Some(Arc::new(|_: &Record| {
        panic!("the host's logger broke")
    })));
    let before = rt.plugin_failures().len();
    assert!(rt
        .load_search_path("/no/such/dir/libmissing_rs.so")
        .is_empty());
    let failures = rt.plugin_failures();
    assert_eq!(failures.len(), before + 1);
    assert!(
        failures[before].error.message.contains("libmissing_rs.so"),
        "{failures:?}"
    );

    // Work that failed and that no one synchronized with is logged when its runtime is
    // destroyed (nothing else could report it then).
    log::set_callback(Some(collect(&seen)));
    {
        let rt = Runtime::new(options()).unwrap();
        rt.load_plugin(plugin_path("devplug_sim"), &[("fail_copy_after", "0")])
            .unwrap();
        let sim = rt.find_device("SIM").unwrap();
        let b = sim.allocate(64).unwrap();
        sim.default_stream().write(&b, 0, vec![1u8; 64]).unwrap();
    }
    {
        let mut s = seen.lock().unwrap();
        let lost: Vec<_> = s
            .iter()
            .filter(|(_, _, m)| m.contains("not reported before the runtime was destroyed"))
            .collect();
        assert_eq!(lost.len(), 1, "{s:?}");
        assert_eq!(lost[0].0, Level::Warn);
        assert!(lost[0].2.contains("injected copy failure"), "{s:?}");
        s.clear();
    }

    // Back to standard error and DEVPLUG_LOG's level; the collecting callback got nothing more.
    log::set_callback(None);
    log::set_level(None);
    assert!(seen.lock().unwrap().is_empty());
    assert!(Level::from_i32(0).is_none() && Level::from_i32(6).is_none());
    assert_eq!(Level::from_i32(3), Some(Level::Info));
}
