//! The SDK driven through its generated tables by the fake host of [`crate::testing`]: a
//! small plugin (memory in a map, deferred streams that run when synchronized) exported
//! with `devplug_plugin!`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::testing::{
    AttrValue, KernelDesc, KernelTensor, TestAttrs, TestDevice, TestHost, TestPlugin, TestStream,
};
use crate::{
    devplug_plugin, CreateArgs, DType, Device, DeviceAddr, DeviceInfo, Error, EventStatus, Host,
    HostBuf, HostBufMut, HostCallback, KernelArgs, KernelContext, KernelSpec, Logger, MemoryUsage,
    OpDef, Platform, PlatformFlags, Result, Status,
};

pub(crate) const TEST_PLATFORM: &str = "TESTP";
const MEMORY: u64 = 1 << 20;

// ---- per-test observation, keyed by the load option `tag` ----------------------------------

#[derive(Default)]
pub(crate) struct Probe {
    platform_drops: AtomicUsize,
    device_drops: AtomicUsize,
    logger: Mutex<Option<Logger>>,
    /// Kernel closures dropped (at shutdown, or at once when the host refused them).
    kernel_drops: AtomicUsize,
    /// What the `Attrs` kernel read.
    pub(crate) attr_reads: Mutex<Vec<String>>,
    /// Calls of the `Count` kernel (bound to ANY), with its number of inputs.
    any_calls: Mutex<Vec<usize>>,
    /// Live allocations on the devices (allocate minus deallocate).
    allocations: AtomicI64,
    /// Calls of the `Scale` kernel's `create` (mode `state`), failed ones included.
    create_calls: AtomicUsize,
    /// What each state `Scale`'s `create` made was made for, in order (state `i + 1`).
    states_made: Mutex<Vec<String>>,
    /// The states `Scale`'s launches got (their numbers), in order.
    pub(crate) states_used: Mutex<Vec<usize>>,
    /// States of `Scale` dropped.
    pub(crate) state_drops: AtomicUsize,
}

/// Captured by every test kernel: counts the drops of the kernel closures.
struct KernelGuard(Arc<Probe>);

impl Drop for KernelGuard {
    fn drop(&mut self) {
        self.0.kernel_drops.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) fn probe(tag: &str) -> Arc<Probe> {
    static PROBES: OnceLock<Mutex<HashMap<String, Arc<Probe>>>> = OnceLock::new();
    let map = PROBES.get_or_init(Default::default);
    Arc::clone(map.lock().entry(tag.to_owned()).or_default())
}

// ---- the test plugin --------------------------------------------------------------------------

fn init(host: &Host) -> Result<()> {
    if host.option("panic_in_init").is_some() {
        panic!("init exploded on purpose");
    }
    let tag = host.option("tag").unwrap_or_default();
    let probe = probe(&tag);
    *probe.logger.lock() = Some(host.logger());
    let platform = TPlatform {
        name: host
            .option("platform")
            .unwrap_or_else(|| TEST_PLATFORM.to_owned()),
        devices: host.option_or("devices", 2)?,
        callback_mode: host.option("callback_mode").unwrap_or_default(),
        timing: host.option_flag("timing")?,
        misalign: host.option_flag("misalign")?,
        probe: Arc::clone(&probe),
        logger: host.logger(),
    };
    let twice = host.option("register_twice").is_some();
    let again = twice.then(|| platform.clone_config());
    let second = host.option("second_platform").map(|name| {
        let mut p = platform.clone_config();
        p.name = name;
        p
    });
    host.register_platform(platform)?;
    if let Some(again) = again {
        host.register_platform(again)?;
    }
    if let Some(second) = second {
        host.register_platform(second)?;
    }
    if let Some(mode) = host.option("kernels") {
        register_test_kernels(host, &mode, &probe)?;
    }
    if let Some(mode) = host.option("ops") {
        let swish = OpDef::new("sdk_test.Swish")
            .inputs("x: T")
            .outputs("y: T")
            .type_vars("T: {f32, f64}")
            .body("s = Sigmoid(x); y = Mul(x, s)");
        host.register_op(&swish)?;
        match mode.as_str() {
            "twice" => host.register_op(&swish)?,
            "nul" => host.register_op(&OpDef::new("sdk_test.Bad").outputs("y: f32").body("y\0"))?,
            _ => {}
        }
    }
    if let Some(msg) = host.option("fail_init") {
        return Err(Error::failed_precondition(msg));
    }
    host.log(crate::LogLevel::Info, "test plugin ready");
    Ok(())
}

// Declares ABI 1.1 (kernels), the oldest host it loads into, so that tests can load it into
// older hosts (`TestHost::with_abi_minor`); it reaches what later minors added by the host's
// table, as the SDK does.
devplug_plugin!(name: "sdk_test", version: "1.2.3", abi_minor: 1, init: init);

// ---- the test plugin's kernels (load option `kernels=<mode>`) -------------------------------

/// `Add` (f32, same shapes) on TPU: checks its arguments now, adds on the stream.
fn add_kernel(cx: &KernelContext<'_, TDevice>) -> Result<()> {
    cx.check_arity(2, 1)?;
    let (x, y, z) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    for t in [x, y, z] {
        if t.dtype() != DType::F32 || t.shape() != z.shape() {
            return Err(Error::invalid_argument(format!(
                "wants f32 tensors of one shape, got {x:?} + {y:?} -> {z:?}"
            )));
        }
        if t.expected_byte_size() != Some(t.byte_size()) {
            return Err(Error::invalid_argument(format!(
                "Add: {t:?} has the wrong size"
            )));
        }
    }
    let n = z.byte_size();
    let (xa, ya, za) = (x.addr(), y.addr(), z.addr());
    let mem = Arc::clone(&cx.device().mem);
    cx.stream().0.enqueue(Box::new(move || {
        let mut m = mem.lock();
        let read = |m: &mut Mem, a: DeviceAddr| -> Result<Vec<f32>> {
            let (block, off) = m.locate(a, n)?;
            Ok(block[off..off + n as usize]
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        };
        let (xs, ys) = (read(&mut m, xa)?, read(&mut m, ya)?);
        let out: Vec<u8> = xs
            .iter()
            .zip(&ys)
            .flat_map(|(a, b)| (a + b).to_ne_bytes())
            .collect();
        let (block, off) = m.locate(za, n)?;
        block[off..off + out.len()].copy_from_slice(&out);
        Ok(())
    }));
    Ok(())
}

/// `Attrs`: reads attributes and records what it got.
fn attrs_kernel(cx: &KernelContext<'_, TDevice>, probe: &Probe) -> Result<()> {
    let mut r = probe.attr_reads.lock();
    r.push(format!("i={:?}", cx.attr_int("i")));
    r.push(format!("f={:?}", cx.attr_float("f")));
    r.push(format!("i as float={:?}", cx.attr_float("i")));
    r.push(format!("b={:?}", cx.attr_bool("b")));
    r.push(format!("v={:?}", cx.attr_ints("v")));
    r.push(format!("d={:?}", cx.attr_dtype("d")));
    r.push(format!("s={:?}", cx.attr_string("s")));
    r.push(format!("empty={:?}", cx.attr_string("empty")));
    let not_a_string = cx.attr_string("i").expect_err("an int");
    r.push(format!(
        "i as string={:?}: {}",
        not_a_string.code(),
        not_a_string.message()
    ));
    let missing = cx.attr_int("missing").expect_err("no such attribute");
    r.push(format!(
        "missing={:?}: {}",
        missing.code(),
        missing.message()
    ));
    let wrong = cx.attr_bool("i").expect_err("an int");
    r.push(format!("i as bool={:?}: {}", wrong.code(), wrong.message()));
    Ok(())
}

/// `TempCopy` (mode `temp`): copies its input to its output on the stream through two
/// temporary buffers (`allocate_temp`): x → t1 → t2 → y. Attributes: `temp_size` asks for
/// buffers of another size (default: the input's bytes); `fail` makes it fail after it has
/// enqueued its copies.
fn temp_copy_kernel(cx: &KernelContext<'_, TDevice>) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    let n = x.byte_size();
    if y.byte_size() != n {
        return Err(Error::invalid_argument(format!(
            "TempCopy: {x:?} -> {y:?}: not the same size"
        )));
    }
    let size = match cx.attr_int("temp_size") {
        Ok(v) => u64::try_from(v)
            .map_err(|_| Error::invalid_argument(format!("TempCopy: temp_size {v}")))?,
        Err(e) if e.code() == Status::NotFound => n,
        Err(e) => return Err(e),
    };
    let t1 = cx.allocate_temp(size)?;
    let t2 = cx.allocate_temp(size)?;
    for t in [t1, t2] {
        if !t.get().is_multiple_of(256) {
            return Err(Error::internal(format!(
                "TempCopy: allocate_temp gave {t}, not 256-byte aligned"
            )));
        }
    }
    let (dev, s) = (cx.device(), cx.stream());
    dev.memcpy_dtod_async(s, t1, x.addr(), n)?;
    dev.memcpy_dtod_async(s, t2, t1, n)?;
    dev.memcpy_dtod_async(s, y.addr(), t2, n)?;
    if cx.attr_bool("fail").unwrap_or(false) {
        return Err(Error::failed_precondition(
            "TempCopy fails on purpose after enqueuing its copies",
        ));
    }
    Ok(())
}

/// The state of the `Scale` kernel (mode `state`, ABI 1.5): made once per device, input dtypes
/// and attributes; numbered in the order made; counts its drop.
struct ScaleState {
    number: usize,
    dtype: DType,
    factor: f64,
    probe: Arc<Probe>,
}

impl Drop for ScaleState {
    fn drop(&mut self) {
        self.probe.state_drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// `Scale`'s `create`: reads the input dtype (f32 or f64) and the attribute `factor` once.
/// Attributes `fail_create` / `panic_create` make it fail or panic.
fn scale_create(args: &CreateArgs<'_, TDevice>, probe: &Arc<Probe>) -> Result<ScaleState> {
    probe.create_calls.fetch_add(1, Ordering::SeqCst);
    if args.attr_bool("panic_create").unwrap_or(false) {
        panic!("create exploded on purpose");
    }
    if args.attr_bool("fail_create").unwrap_or(false) {
        return Err(Error::failed_precondition(
            "Scale refuses to make a state on purpose",
        ));
    }
    let dtype = args.input_dtype(0)?;
    if dtype != DType::F32 && dtype != DType::F64 {
        return Err(Error::invalid_argument(format!(
            "{}: scales f32 or f64, not {dtype}",
            args.op()
        )));
    }
    let factor = args.attr_float("factor")?;
    let mut made = probe.states_made.lock();
    made.push(format!("{:?} x{factor}", args.input_dtypes()));
    Ok(ScaleState {
        number: made.len(),
        dtype,
        factor,
        probe: Arc::clone(probe),
    })
}

/// `Scale`'s `compute`: y = x * factor on the stream, the factor and the dtype copied out of
/// the state into the work. Attribute `panic_compute` makes it panic after it enqueued it.
fn scale_compute(cx: &KernelContext<'_, TDevice>, s: &ScaleState) -> Result<()> {
    s.probe.states_used.lock().push(s.number);
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    let n = x.byte_size();
    if x.dtype() != s.dtype || y.dtype() != s.dtype || y.byte_size() != n {
        return Err(Error::invalid_argument(format!(
            "Scale: {x:?} -> {y:?} for a state of {}",
            s.dtype
        )));
    }
    let (xa, ya, dtype, factor) = (x.addr(), y.addr(), s.dtype, s.factor);
    let mem = Arc::clone(&cx.device().mem);
    cx.stream().0.enqueue(Box::new(move || {
        let mut m = mem.lock();
        let (block, off) = m.locate(xa, n)?;
        let xs = block[off..off + n as usize].to_vec();
        let out: Vec<u8> = if dtype == DType::F32 {
            xs.chunks_exact(4)
                .flat_map(|c| {
                    ((f32::from_ne_bytes([c[0], c[1], c[2], c[3]]) as f64 * factor) as f32)
                        .to_ne_bytes()
                })
                .collect()
        } else {
            xs.chunks_exact(8)
                .flat_map(|c| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    (f64::from_ne_bytes(b) * factor).to_ne_bytes()
                })
                .collect()
        };
        let (block, off) = m.locate(ya, n)?;
        block[off..off + out.len()].copy_from_slice(&out);
        Ok(())
    }));
    if cx.attr_bool("panic_compute").unwrap_or(false) {
        panic!("compute exploded on purpose");
    }
    Ok(())
}

/// Registers the test kernels; `mode` picks extra (failing) registrations.
fn register_test_kernels(host: &Host, mode: &str, probe: &Arc<Probe>) -> Result<()> {
    let guard = || KernelGuard(Arc::clone(probe));
    let g = guard();
    host.register_kernel(
        KernelSpec::new("Add", "TPU").dtypes(&[DType::F32]),
        move |cx: &KernelContext<'_, TDevice>| {
            let _ = &g;
            add_kernel(cx)
        },
    )?;
    let g = guard();
    host.register_kernel(KernelSpec::new("Attrs", "TPU"), move |cx| {
        attrs_kernel(cx, &g.0)
    })?;
    let g = guard();
    host.register_kernel(
        KernelSpec::new("Explode", "TPU").platform(TEST_PLATFORM),
        move |_cx: &KernelContext<'_, TDevice>| -> Result<()> {
            let _ = &g;
            panic!("kernel exploded on purpose")
        },
    )?;
    let g = guard();
    host.register_kernel::<TDevice, _>(KernelSpec::new("Refuse", "TPU"), move |cx| {
        let _ = &g;
        Err(Error::unimplemented(format!(
            "{} refuses on purpose on {}",
            cx.op(),
            cx.device().info().hardware_name.unwrap_or_default()
        )))
    })?;
    let g = guard();
    host.register_any_kernel(
        KernelSpec::new("Count", "TPU").priority(3),
        move |args: &KernelArgs<'_>| {
            g.0.any_calls.lock().push(args.inputs().len());
            Ok(())
        },
    )?;
    match mode {
        "conflict" => host.register_kernel(
            KernelSpec::new("Add", "TPU").dtypes(&[DType::F64, DType::F32]),
            {
                let g = guard();
                move |_cx: &KernelContext<'_, TDevice>| {
                    let _ = &g;
                    Ok(())
                }
            },
        ),
        "higher" => host.register_kernel(
            KernelSpec::new("Add", "TPU")
                .dtypes(&[DType::F32])
                .priority(1),
            {
                let g = guard();
                move |_cx: &KernelContext<'_, TDevice>| {
                    let _ = &g;
                    Err(Error::internal("the priority-1 Add ran"))
                }
            },
        ),
        "wrong_device" => host.register_kernel(
            KernelSpec::new("Sub", "TPU"),
            |_cx: &KernelContext<'_, NoDevice>| Ok(()),
        ),
        "any_bound" => host.register_kernel(
            KernelSpec::new("Sub", "TPU").platform("ANY"),
            |_cx: &KernelContext<'_, TDevice>| Ok(()),
        ),
        "any_named" => host.register_any_kernel(
            KernelSpec::new("Sub", "TPU").platform(TEST_PLATFORM),
            |_args: &KernelArgs<'_>| Ok(()),
        ),
        "foreign" => host.register_kernel(
            KernelSpec::new("Sub", "TPU").platform("NOPE"),
            |_cx: &KernelContext<'_, TDevice>| Ok(()),
        ),
        "other_type" => host.register_kernel(
            KernelSpec::new("Sub", "GPU"),
            |_cx: &KernelContext<'_, TDevice>| Ok(()),
        ),
        "ambiguous" => host.register_kernel(
            KernelSpec::new("Sub", "TPU"),
            |_cx: &KernelContext<'_, TDevice>| Ok(()),
        ),
        "temp" => host.register_kernel(KernelSpec::new("TempCopy", "TPU"), temp_copy_kernel),
        "state" => {
            let (g, p) = (guard(), Arc::clone(probe));
            host.register_kernel_with_state(
                KernelSpec::new("Scale", "TPU"),
                move |args: &CreateArgs<'_, TDevice>| {
                    let _ = &g;
                    scale_create(args, &p)
                },
                scale_compute,
            )
        }
        // A kernel for a device type with no platform of this plugin, its `Err` dropped.
        "ignored" => {
            let _ = host.register_kernel(
                KernelSpec::new("Sub", "GPU"),
                |_cx: &KernelContext<'_, TDevice>| Ok(()),
            );
            Ok(())
        }
        "halves" => {
            let g = guard();
            host.register_kernel(
                KernelSpec::new("Sub", "TPU").dtypes(&[DType::F16, DType::F32, DType::BF16]),
                move |_cx: &KernelContext<'_, TDevice>| {
                    let _ = &g;
                    Ok(())
                },
            )?;
            let g = guard();
            host.register_kernel(
                KernelSpec::new("Mul", "TPU").dtypes(&[DType::BF16, DType::F16]),
                move |_cx: &KernelContext<'_, TDevice>| {
                    let _ = &g;
                    Ok(())
                },
            )
        }
        _ => Ok(()),
    }
}

/// A device type no platform of the test plugin has (for the type check of register_kernel).
struct NoDevice;

fn no() -> Error {
    Error::unimplemented("NoDevice")
}

impl Device for NoDevice {
    type Stream = ();
    type Event = ();
    fn allocate(&self, _: u64) -> Result<DeviceAddr> {
        Err(no())
    }
    fn deallocate(&self, _: DeviceAddr, _: u64) {}
    fn memcpy_htod(&self, _: DeviceAddr, _: &[u8]) -> Result<()> {
        Err(no())
    }
    fn memcpy_dtoh(&self, _: &mut [u8], _: DeviceAddr) -> Result<()> {
        Err(no())
    }
    fn memcpy_dtod(&self, _: DeviceAddr, _: DeviceAddr, _: u64) -> Result<()> {
        Err(no())
    }
    fn memset(&self, _: DeviceAddr, _: u8, _: u64) -> Result<()> {
        Err(no())
    }
    fn create_stream(&self) -> Result<()> {
        Err(no())
    }
    fn synchronize_stream(&self, _: &()) -> Result<()> {
        Err(no())
    }
    fn stream_wait_stream(&self, _: &(), _: &()) -> Result<()> {
        Err(no())
    }
    fn memcpy_htod_async(&self, _: &(), _: DeviceAddr, _: HostBuf) -> Result<()> {
        Err(no())
    }
    fn memcpy_dtoh_async(&self, _: &(), _: HostBufMut, _: DeviceAddr) -> Result<()> {
        Err(no())
    }
    fn memcpy_dtod_async(&self, _: &(), _: DeviceAddr, _: DeviceAddr, _: u64) -> Result<()> {
        Err(no())
    }
    fn memset_async(&self, _: &(), _: DeviceAddr, _: u8, _: u64) -> Result<()> {
        Err(no())
    }
    fn host_callback(&self, _: &(), _: HostCallback) -> Result<()> {
        Err(no())
    }
    fn create_event(&self) -> Result<()> {
        Err(no())
    }
    fn record_event(&self, _: &(), _: &()) -> Result<()> {
        Err(no())
    }
    fn event_status(&self, _: &()) -> Result<EventStatus> {
        Err(no())
    }
    fn stream_wait_event(&self, _: &(), _: &()) -> Result<()> {
        Err(no())
    }
    fn event_synchronize(&self, _: &()) -> Result<()> {
        Err(no())
    }
    fn synchronize_all(&self) -> Result<()> {
        Err(no())
    }
}

struct TPlatform {
    name: String,
    devices: i32,
    callback_mode: String,
    /// Load option `timing`: the devices time their events.
    timing: bool,
    /// Load option `misalign`: the devices' allocations are 16 bytes past a multiple of 256.
    misalign: bool,
    probe: Arc<Probe>,
    logger: Logger,
}

impl TPlatform {
    fn clone_config(&self) -> TPlatform {
        TPlatform {
            name: self.name.clone(),
            devices: self.devices,
            callback_mode: self.callback_mode.clone(),
            timing: self.timing,
            misalign: self.misalign,
            probe: Arc::clone(&self.probe),
            logger: self.logger.clone(),
        }
    }
}

impl Drop for TPlatform {
    fn drop(&mut self) {
        self.probe.platform_drops.fetch_add(1, Ordering::SeqCst);
    }
}

impl Platform for TPlatform {
    type Device = TDevice;

    fn name(&self) -> &str {
        &self.name
    }

    fn device_type(&self) -> &str {
        "TPU"
    }

    fn priority(&self) -> i32 {
        7
    }

    fn flags(&self) -> PlatformFlags {
        PlatformFlags::NO_SUBALLOCATOR
    }

    fn vendor(&self) -> Option<&str> {
        Some("devplug tests")
    }

    fn device_count(&self) -> i32 {
        self.devices
    }

    fn create_device(&self, ordinal: i32) -> Result<TDevice> {
        self.logger.info(format!("creating device {ordinal}"));
        Ok(TDevice {
            mem: Arc::new(Mutex::new(Mem {
                blocks: BTreeMap::new(),
                next: 0x1000,
                used: 0,
            })),
            streams: Mutex::new(Vec::new()),
            callback_mode: self.callback_mode.clone(),
            timing: self.timing,
            misalign: self.misalign,
            clock: Arc::new(AtomicI64::new(0)),
            probe: Arc::clone(&self.probe),
        })
    }
}

struct Mem {
    blocks: BTreeMap<u64, Vec<u8>>,
    next: u64,
    used: u64,
}

impl Mem {
    /// The block holding `[addr, addr + len)` and the offset of `addr` in it.
    fn locate(&mut self, addr: DeviceAddr, len: u64) -> Result<(&mut Vec<u8>, usize)> {
        let a = addr.get();
        let (&base, block) = self
            .blocks
            .range_mut(..=a)
            .next_back()
            .ok_or_else(|| Error::invalid_argument(format!("{addr} is not device memory")))?;
        let off = a - base;
        if off + len > block.len() as u64 {
            return Err(Error::invalid_argument(format!(
                "{addr}+{len} runs past its allocation"
            )));
        }
        Ok((block, off as usize))
    }
}

type Op = Box<dyn FnOnce() -> Result<()> + Send>;

/// A stream whose work runs when someone waits for it (on the waiting thread): it never
/// runs inside the call that enqueued it.
#[derive(Default)]
struct TStreamInner {
    queue: Mutex<VecDeque<Op>>,
    error: Mutex<Option<Error>>,
    /// The device's clock (ns): every operation a stream runs takes [`OP_NS`].
    clock: Arc<AtomicI64>,
}

/// How long each stream operation takes on the test device's clock.
pub(crate) const OP_NS: i64 = 1_000;

impl TStreamInner {
    fn enqueue(&self, op: Op) {
        self.queue.lock().push_back(op);
    }

    fn drain(&self) {
        loop {
            let Some(op) = self.queue.lock().pop_front() else {
                break;
            };
            if let Err(e) = op() {
                self.error.lock().get_or_insert(e);
            }
            self.clock.fetch_add(OP_NS, Ordering::SeqCst);
        }
    }

    fn sync(&self) -> Result<()> {
        self.drain();
        self.error.lock().take().map_or(Ok(()), Err)
    }
}

struct TStream(Arc<TStreamInner>);

/// An event's state: its status, whether it was ever recorded, and when (on the device's
/// clock) its stream reached it.
struct TEventState {
    status: EventStatus,
    recorded: bool,
    at: i64,
}

struct TEvent {
    state: Arc<Mutex<TEventState>>,
    stream: Mutex<Option<Weak<TStreamInner>>>,
}

struct TDevice {
    mem: Arc<Mutex<Mem>>,
    streams: Mutex<Vec<Weak<TStreamInner>>>,
    callback_mode: String,
    /// Whether the device times its events (load option `timing`).
    timing: bool,
    /// Load option `misalign`.
    misalign: bool,
    /// The device's clock (ns), shared with its streams.
    clock: Arc<AtomicI64>,
    probe: Arc<Probe>,
}

impl Drop for TDevice {
    fn drop(&mut self) {
        self.probe.device_drops.fetch_add(1, Ordering::SeqCst);
    }
}

impl Device for TDevice {
    type Stream = TStream;
    type Event = TEvent;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            hardware_name: Some("Test Chip".into()),
            total_memory: MEMORY,
            compute_units: 4,
            ..DeviceInfo::default()
        }
    }

    fn allocate(&self, size: u64) -> Result<DeviceAddr> {
        let mut m = self.mem.lock();
        if m.used + size > MEMORY {
            return Err(Error::resource_exhausted(format!(
                "out of device memory: {size} bytes asked, {} free",
                MEMORY - m.used
            )));
        }
        let skew = if self.misalign { 16 } else { 0 };
        let addr = m.next + skew;
        m.next += (size + skew).next_multiple_of(256);
        m.used += size;
        m.blocks.insert(addr, vec![0; size as usize]);
        self.probe.allocations.fetch_add(1, Ordering::SeqCst);
        Ok(DeviceAddr(addr))
    }

    fn deallocate(&self, addr: DeviceAddr, size: u64) {
        let mut m = self.mem.lock();
        if m.blocks.remove(&addr.get()).is_some() {
            m.used -= size;
            self.probe.allocations.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn provides_memory_usage(&self) -> bool {
        true
    }

    fn memory_usage(&self) -> Result<MemoryUsage> {
        let used = self.mem.lock().used;
        Ok(MemoryUsage {
            free: MEMORY - used,
            total: MEMORY,
        })
    }

    fn memcpy_htod(&self, dst: DeviceAddr, src: &[u8]) -> Result<()> {
        let mut m = self.mem.lock();
        let (block, off) = m.locate(dst, src.len() as u64)?;
        block[off..off + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DeviceAddr) -> Result<()> {
        let mut m = self.mem.lock();
        let (block, off) = m.locate(src, dst.len() as u64)?;
        dst.copy_from_slice(&block[off..off + dst.len()]);
        Ok(())
    }

    fn memcpy_dtod(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()> {
        let mut tmp = vec![0; size as usize];
        self.memcpy_dtoh(&mut tmp, src)?;
        self.memcpy_htod(dst, &tmp)
    }

    fn memset(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        if value == 0xEE {
            panic!("memset exploded on purpose");
        }
        let mut m = self.mem.lock();
        let (block, off) = m.locate(dst, size)?;
        block[off..off + size as usize].fill(value);
        Ok(())
    }

    fn create_stream(&self) -> Result<TStream> {
        let inner = Arc::new(TStreamInner {
            clock: Arc::clone(&self.clock),
            ..TStreamInner::default()
        });
        self.streams.lock().push(Arc::downgrade(&inner));
        Ok(TStream(inner))
    }

    fn synchronize_stream(&self, stream: &TStream) -> Result<()> {
        stream.0.sync()
    }

    fn stream_wait_stream(&self, _stream: &TStream, other: &TStream) -> Result<()> {
        other.0.drain();
        Ok(())
    }

    fn memcpy_htod_async(&self, stream: &TStream, dst: DeviceAddr, src: HostBuf) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        stream.0.enqueue(Box::new(move || {
            let mut m = mem.lock();
            let (block, off) = m.locate(dst, src.len() as u64)?;
            // SAFETY: the stream is executing this copy, in order.
            let bytes = unsafe { src.as_slice() };
            block[off..off + bytes.len()].copy_from_slice(bytes);
            Ok(())
        }));
        Ok(())
    }

    fn memcpy_dtoh_async(
        &self,
        stream: &TStream,
        mut dst: HostBufMut,
        src: DeviceAddr,
    ) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        stream.0.enqueue(Box::new(move || {
            let mut m = mem.lock();
            let (block, off) = m.locate(src, dst.len() as u64)?;
            // SAFETY: the stream is executing this copy, in order.
            let out = unsafe { dst.as_mut_slice() };
            out.copy_from_slice(&block[off..off + out.len()]);
            Ok(())
        }));
        Ok(())
    }

    fn memcpy_dtod_async(
        &self,
        stream: &TStream,
        dst: DeviceAddr,
        src: DeviceAddr,
        size: u64,
    ) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        stream.0.enqueue(Box::new(move || {
            let mut m = mem.lock();
            let (block, off) = m.locate(src, size)?;
            let tmp = block[off..off + size as usize].to_vec();
            let (block, off) = m.locate(dst, size)?;
            block[off..off + tmp.len()].copy_from_slice(&tmp);
            Ok(())
        }));
        Ok(())
    }

    fn memset_async(&self, stream: &TStream, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        let mem = Arc::clone(&self.mem);
        stream.0.enqueue(Box::new(move || {
            let mut m = mem.lock();
            let (block, off) = m.locate(dst, size)?;
            block[off..off + size as usize].fill(value);
            Ok(())
        }));
        Ok(())
    }

    fn host_callback(&self, stream: &TStream, callback: HostCallback) -> Result<()> {
        match self.callback_mode.as_str() {
            "drop" => {
                drop(callback);
                Ok(())
            }
            "refuse" => Err(Error::unavailable("callbacks refused on purpose")),
            // Inside the method, once the stream's earlier work is done (as the ABI allows).
            "inline" => {
                stream.0.drain();
                callback.call();
                Ok(())
            }
            // The same, then an error: the plugin's bug.
            "inline_err" => {
                stream.0.drain();
                callback.call();
                Err(Error::unavailable("failed after calling it"))
            }
            _ => {
                stream.0.enqueue(Box::new(move || {
                    callback.call();
                    Ok(())
                }));
                Ok(())
            }
        }
    }

    fn create_event(&self) -> Result<TEvent> {
        Ok(TEvent {
            state: Arc::new(Mutex::new(TEventState {
                status: EventStatus::Complete,
                recorded: false,
                at: 0,
            })),
            stream: Mutex::new(None),
        })
    }

    fn record_event(&self, stream: &TStream, event: &TEvent) -> Result<()> {
        {
            let mut st = event.state.lock();
            st.status = EventStatus::Pending;
            st.recorded = true;
        }
        *event.stream.lock() = Some(Arc::downgrade(&stream.0));
        let state = Arc::clone(&event.state);
        let weak = Arc::downgrade(&stream.0);
        stream.0.enqueue(Box::new(move || {
            // Reached after a failure of its stream (not yet returned by a synchronize): the
            // ABI's EventStatus::Error.
            let (failed, at) = weak.upgrade().map_or((false, 0), |s| {
                (s.error.lock().is_some(), s.clock.load(Ordering::SeqCst))
            });
            let mut st = state.lock();
            st.status = if failed {
                EventStatus::Error
            } else {
                EventStatus::Complete
            };
            st.at = at;
            Ok(())
        }));
        Ok(())
    }

    fn event_status(&self, event: &TEvent) -> Result<EventStatus> {
        Ok(event.state.lock().status)
    }

    fn provides_event_timing(&self) -> bool {
        self.timing
    }

    fn event_elapsed_ns(&self, start: &TEvent, end: &TEvent) -> Result<i64> {
        let at = |which: &str, event: &TEvent| {
            let st = event.state.lock();
            let why = match st.status {
                _ if !st.recorded => "was never recorded",
                EventStatus::Pending => "is still pending",
                EventStatus::Error => "reports an error: its stream failed before reaching it",
                EventStatus::Complete => return Ok(st.at),
            };
            Err(Error::failed_precondition(format!(
                "the {which} event {why}"
            )))
        };
        let start = at("start", start)?;
        Ok(at("end", end)? - start)
    }

    fn stream_wait_event(&self, _stream: &TStream, event: &TEvent) -> Result<()> {
        self.event_synchronize(event)
    }

    fn event_synchronize(&self, event: &TEvent) -> Result<()> {
        let stream = event.stream.lock().as_ref().and_then(Weak::upgrade);
        if let Some(stream) = stream {
            stream.drain();
        }
        Ok(())
    }

    fn synchronize_all(&self) -> Result<()> {
        let streams: Vec<_> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        streams.iter().try_for_each(|s| s.sync())
    }
}

// ---- tests ----------------------------------------------------------------------------------

#[test]
fn the_entry_table_describes_the_plugin() {
    let host = TestHost::new().with_option("tag", "entry");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert_eq!(plugin.name(), "sdk_test");
    assert_eq!(plugin.version(), "1.2.3");
    assert!(host
        .logs()
        .iter()
        .any(|(l, m)| *l == crate::abi::DPP_LOG_INFO && m == "test plugin ready"));
}

#[test]
fn registration_reads_the_load_options() {
    let host = TestHost::new()
        .with_option("tag", "options")
        .with_option("devices", " 3 ")
        .with_option("platform", "OTHER");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let p = plugin.platforms();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].name, "OTHER");
    assert_eq!(p[0].device_type, "TPU");
    assert_eq!(p[0].priority, 7);
    assert_eq!(p[0].flags, PlatformFlags::NO_SUBALLOCATOR);
    assert_eq!(p[0].vendor.as_deref(), Some("devplug tests"));
    assert_eq!(p[0].version, None);
    assert_eq!(p[0].device_count, 3);
}

#[test]
fn a_switch_takes_the_usual_spellings_and_refuses_others() {
    for (value, on) in [
        ("1", true),
        ("Yes", true),
        ("on", true),
        ("0", false),
        ("off", false),
    ] {
        let tag = format!("switch_{value}");
        let host = TestHost::new()
            .with_option("tag", &tag)
            .with_option("timing", value);
        let plugin = host.load(devplug_plugin_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        // A device that times its events offers event_elapsed_ns.
        let timed = dev.executor().event_elapsed_ns.is_some();
        assert_eq!(timed, on, "timing={value}");
    }
    let host = TestHost::new()
        .with_option("tag", "switch_bad")
        .with_option("timing", "2");
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert!(
        err.message()
            .contains("load option `timing`: invalid value \"2\": a switch takes 1, true"),
        "{err}"
    );
}

/// A test host older than the plugin's declared minor refuses it as such a host would, and
/// says how to test the older path.
#[test]
fn a_test_host_older_than_the_plugin_refuses_it_and_says_what_to_do() {
    let host = TestHost::new()
        .with_option("tag", "older_host")
        .with_abi_minor(0);
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::AbiMismatch);
    assert_eq!(
        err.message(),
        "plugin ABI 1.1, host ABI 1.0: a 1.0 host refuses a plugin of a newer minor, as this \
         test host does; to test your plugin with such a host, declare `abi_minor: 0,` in \
         devplug_plugin! (a build of the plugin that loads into 1.0 hosts)"
    );
}

#[test]
fn an_unparsable_option_is_an_invalid_argument_naming_it() {
    let host = TestHost::new()
        .with_option("tag", "badopt")
        .with_option("devices", "many");
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert!(
        err.message().contains("`devices`") && err.message().contains("\"many\""),
        "{err}"
    );
    assert_eq!(
        probe("badopt").platform_drops.load(Ordering::SeqCst),
        0,
        "nothing was registered"
    );
}

#[test]
fn device_creation_fills_the_device_struct_and_table() {
    let host = TestHost::new().with_option("tag", "create");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 1).expect("device");
    assert_eq!(dev.ordinal(), 1);
    let info = dev.info();
    assert_eq!(info.hardware_name.as_deref(), Some("Test Chip"));
    assert_eq!(info.vendor, None);
    assert_eq!(info.total_memory, MEMORY);
    assert_eq!(info.numa_node, None);
    assert_eq!(info.compute_units, 4);
    // Required entries were checked by the harness; the optional ones follow provides_*.
    let se = dev.executor();
    assert!(se.memory_usage.is_some());
    assert!(se.host_allocate.is_none() && se.host_deallocate.is_none());
    assert!(se.unified_allocate.is_none() && se.unified_deallocate.is_none());
    assert!(se.allocator_stats.is_none());
    assert_eq!(se.struct_size, crate::abi::DPP_STREAM_EXECUTOR_STRUCT_SIZE);
    assert_eq!(
        dev.memory_usage().expect("usage"),
        MemoryUsage {
            free: MEMORY,
            total: MEMORY
        }
    );
    assert!(host.logs().iter().any(|(_, m)| m == "creating device 1"));
}

#[test]
fn a_synchronous_copy_round_trip() {
    let host = TestHost::new().with_option("tag", "sync_copy");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let a = dev.allocate(64).expect("a");
    let b = dev.allocate(64).expect("b");
    let data: Vec<u8> = (0..64).collect();
    dev.memcpy_htod(a, &data).expect("htod");
    dev.memcpy_dtod(b, a, 64).expect("dtod");
    dev.memset(b.checked_add(60).expect("in range"), 9, 4)
        .expect("memset");
    let mut out = vec![0u8; 64];
    dev.memcpy_dtoh(&mut out, b).expect("dtoh");
    assert_eq!(&out[..60], &data[..60]);
    assert_eq!(&out[60..], &[9, 9, 9, 9]);
    dev.deallocate(a, 64);
    dev.deallocate(b, 64);
    assert_eq!(dev.memory_usage().expect("usage").free, MEMORY);
}

#[test]
fn a_stream_ordered_round_trip_with_events_and_callbacks() {
    let host = TestHost::new().with_option("tag", "async_copy");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let a = dev.allocate(32).expect("a");
    let s1 = dev.create_stream().expect("s1");
    let s2 = dev.create_stream().expect("s2");
    let ev = dev.create_event().expect("event");
    assert_eq!(
        ev.status().expect("status"),
        EventStatus::Complete,
        "never recorded"
    );

    let calls = Arc::new(AtomicUsize::new(0));
    s1.memcpy_htod_async(a, &[7; 32]).expect("htod");
    s1.memset_async(a, 1, 8).expect("memset");
    s1.record(&ev).expect("record");
    let c = Arc::clone(&calls);
    s1.host_callback(move || {
        c.fetch_add(1, Ordering::SeqCst);
    })
    .expect("callback");
    assert_eq!(ev.status().expect("status"), EventStatus::Pending);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "not run inside host_callback"
    );

    s2.wait_event(&ev).expect("wait");
    let t = s2.memcpy_dtoh_async(a, 32).expect("dtoh");
    s2.synchronize().expect("sync s2");
    assert_eq!(ev.status().expect("status"), EventStatus::Complete);
    let mut want = vec![7u8; 32];
    want[..8].fill(1);
    assert_eq!(s2.take_read(t).expect("read"), want);

    s1.synchronize().expect("sync s1");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "called exactly once");
    dev.synchronize_all().expect("sync all");
    drop((s1, s2, ev));
    dev.deallocate(a, 32);
}

#[test]
fn a_device_that_times_events_reports_elapsed_ns() {
    let host = TestHost::new()
        .with_option("tag", "timing")
        .with_option("timing", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    assert!(
        dev.executor().event_elapsed_ns.is_some(),
        "provides_event_timing"
    );
    let a = dev.allocate(16).expect("a");
    let (s1, s2) = (
        dev.create_stream().expect("s1"),
        dev.create_stream().expect("s2"),
    );
    let (e1, e2, e3) = (
        dev.create_event().expect("e1"),
        dev.create_event().expect("e2"),
        dev.create_event().expect("e3"),
    );
    let failed = |r: Result<i64>| {
        let err = r.expect_err("refused");
        assert_eq!(err.code(), Status::FailedPrecondition, "{err}");
        err.message().to_owned()
    };
    assert_eq!(
        failed(e1.elapsed_ns(&e2)),
        "the start event was never recorded"
    );

    s1.record(&e1).expect("record e1");
    s1.memset_async(a, 1, 16).expect("memset");
    s1.memset_async(a, 2, 16).expect("memset");
    s1.record(&e2).expect("record e2");
    assert_eq!(
        failed(e1.elapsed_ns(&e2)),
        "the start event is still pending"
    );
    assert_eq!(
        failed(e1.elapsed_ns(&e3)),
        "the start event is still pending"
    );
    s1.synchronize().expect("sync s1");
    assert_eq!(
        failed(e1.elapsed_ns(&e3)),
        "the end event was never recorded"
    );
    // The record of e1, then two memsets: three operations of the device's clock.
    assert_eq!(e1.elapsed_ns(&e2).expect("elapsed"), 3 * OP_NS);
    assert_eq!(e2.elapsed_ns(&e1).expect("reversed"), -3 * OP_NS);
    assert_eq!(e1.elapsed_ns(&e1).expect("itself"), 0);

    // Another stream: the device's one clock.
    s2.memset_async(a, 3, 16).expect("memset");
    s2.record(&e3).expect("record e3");
    s2.synchronize().expect("sync s2");
    assert_eq!(e1.elapsed_ns(&e3).expect("across streams"), 5 * OP_NS);
    // A new record counts from there.
    s1.record(&e1).expect("record e1 again");
    s1.synchronize().expect("sync s1");
    assert_eq!(e1.elapsed_ns(&e3).expect("e3 came first"), -OP_NS);

    // An event reached after its stream failed.
    s2.memset_async(DeviceAddr(0x10), 0, 4).expect("enqueued");
    s2.record(&e3).expect("record e3 again");
    e3.synchronize().expect("reached");
    assert_eq!(e3.status().expect("status"), EventStatus::Error);
    assert_eq!(
        failed(e1.elapsed_ns(&e3)),
        "the end event reports an error: its stream failed before reaching it"
    );
    s2.synchronize().expect_err("the stream's error");
    drop((s1, s2));
    dev.deallocate(a, 16);
}

#[test]
fn a_device_that_does_not_time_events_leaves_the_entry_null() {
    let host = TestHost::new().with_option("tag", "no_timing");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    assert!(dev.executor().event_elapsed_ns.is_none());
    let s = dev.create_stream().expect("stream");
    let (e1, e2) = (
        dev.create_event().expect("e1"),
        dev.create_event().expect("e2"),
    );
    s.record(&e1).expect("record");
    s.record(&e2).expect("record");
    s.synchronize().expect("sync");
    let err = e1.elapsed_ns(&e2).expect_err("NULL entry");
    assert_eq!(err.code(), Status::Unimplemented);
    assert!(err.message().contains("event_elapsed_ns is NULL"), "{err}");

    // The trait's default, for a device that says it times events but does not.
    assert!(!NoDevice.provides_event_timing());
    let err = NoDevice.event_elapsed_ns(&(), &()).expect_err("default");
    assert_eq!(err.code(), Status::Unimplemented);
    assert_eq!(
        err.message(),
        "event timing (event_elapsed_ns) is not implemented by this device"
    );
}

#[test]
fn a_stream_error_is_returned_by_synchronize() {
    let host = TestHost::new().with_option("tag", "async_err");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    s.memset_async(DeviceAddr(0x10), 0, 4).expect("enqueued");
    let err = s.synchronize().expect_err("fails");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert!(err.message().contains("0x10 is not device memory"), "{err}");
}

#[test]
fn a_panic_in_a_device_method_is_internal_with_the_message() {
    let host = TestHost::new().with_option("tag", "panic");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let a = dev.allocate(16).expect("a");
    let err = dev.memset(a, 0xEE, 16).expect_err("panicked");
    assert_eq!(err.code(), Status::Internal);
    // The host names the plugin and the function (`plugin 'sdk_test': memset: …`): the
    // message repeats neither.
    assert_eq!(err.message(), "panicked: memset exploded on purpose");
    // The device is still usable.
    dev.memset(a, 1, 16).expect("memset after the panic");
    dev.deallocate(a, 16);
}

#[test]
fn errors_carry_their_code_and_message() {
    let host = TestHost::new().with_option("tag", "errors");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let err = dev.allocate(MEMORY + 1).expect_err("too big");
    assert_eq!(err.code(), Status::ResourceExhausted);
    assert_eq!(
        err.message(),
        format!(
            "out of device memory: {} bytes asked, {MEMORY} free",
            MEMORY + 1
        )
    );
    let err = dev
        .memcpy_htod(DeviceAddr(0x99), &[1])
        .expect_err("bad address");
    assert_eq!(err.code(), Status::InvalidArgument);
    let err = dev.host_allocate(8).expect_err("NULL entry");
    assert_eq!(err.code(), Status::Unimplemented);
}

#[test]
fn an_init_error_reaches_the_host_and_rolls_back() {
    let host = TestHost::new()
        .with_option("tag", "init_err")
        .with_option("fail_init", "no hardware found");
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::FailedPrecondition);
    assert_eq!(err.message(), "no hardware found");
    assert_eq!(
        probe("init_err").platform_drops.load(Ordering::SeqCst),
        1,
        "rolled back"
    );
}

#[test]
fn a_panic_in_init_is_internal_with_the_message() {
    let host = TestHost::new().with_option("panic_in_init", "1");
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::Internal);
    assert_eq!(err.message(), "panicked: init exploded on purpose");
}

#[test]
fn a_refused_registration_fails_init_with_the_hosts_code() {
    let host = TestHost::new()
        .with_option("tag", "twice")
        .with_option("register_twice", "1");
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::AlreadyExists);
    assert_eq!(
        err.message(),
        "platform TESTP is already registered \
         (init then failed: the host refused platform TESTP (ALREADY_EXISTS, status 6))",
        "the host's message, then the plugin's"
    );
    // The refused platform was dropped at once, the registered one by the rollback.
    assert_eq!(probe("twice").platform_drops.load(Ordering::SeqCst), 2);
}

#[test]
fn teardown_drops_devices_then_platforms_and_silences_loggers() {
    let host = TestHost::new().with_option("tag", "teardown");
    let p = probe("teardown");
    {
        let plugin = host.load(devplug_plugin_entry).expect("load");
        let d0 = plugin.create_device(TEST_PLATFORM, 0).expect("d0");
        let d1 = plugin.create_device(TEST_PLATFORM, 1).expect("d1");
        drop(d0);
        assert_eq!(p.device_drops.load(Ordering::SeqCst), 1);
        drop(d1);
        assert_eq!(p.platform_drops.load(Ordering::SeqCst), 0);
    }
    assert_eq!(p.device_drops.load(Ordering::SeqCst), 2);
    assert_eq!(p.platform_drops.load(Ordering::SeqCst), 1);
    let before = host.logs().len();
    let logger = p.logger.lock().take().expect("kept by init");
    logger.error("after shutdown");
    assert_eq!(
        host.logs().len(),
        before,
        "a logger is silent after shutdown"
    );
}

#[test]
fn host_callbacks_run_once_or_never() {
    for (mode, code) in [("drop", Status::Internal), ("refuse", Status::Unavailable)] {
        let host = TestHost::new().with_option("callback_mode", mode);
        let plugin = host.load(devplug_plugin_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let s = dev.create_stream().expect("stream");
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        let err = s
            .host_callback(move || {
                c.fetch_add(1, Ordering::SeqCst);
            })
            .expect_err("refused");
        assert_eq!(err.code(), code, "{mode}: {err}");
        s.synchronize().expect("sync");
        assert_eq!(calls.load(Ordering::SeqCst), 0, "{mode}: never called");
        assert_eq!(
            Arc::strong_count(&calls),
            1,
            "{mode}: the closure was freed"
        );
    }
}

/// A callback called inside `host_callback`, after the stream's earlier work: allowed, it runs
/// once, in stream order. An `Err` after such a call cannot unrun it: the host is told `Ok`
/// (an error would make it clean up its argument a second time: the fake host would free
/// the closure twice) and the log says it is the plugin's bug.
#[test]
fn a_host_callback_may_be_called_inline() {
    for mode in ["inline", "inline_err"] {
        let host = TestHost::new().with_option("callback_mode", mode);
        let plugin = host.load(devplug_plugin_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let a = dev.allocate(8).expect("a");
        let s = dev.create_stream().expect("stream");
        s.memset_async(a, 3, 8).expect("memset");
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        s.host_callback(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap_or_else(|e| panic!("{mode}: the host is told Ok: {e}"));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{mode}: called inline");
        let mut out = [0; 8];
        dev.memcpy_dtoh(&mut out, a).expect("dtoh");
        assert_eq!(out, [3; 8], "{mode}: after the stream's earlier work");
        s.synchronize().expect("sync");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{mode}: exactly once");
        assert_eq!(
            Arc::strong_count(&calls),
            1,
            "{mode}: the closure was freed"
        );
        let errors: Vec<String> = host
            .logs()
            .into_iter()
            .filter(|(level, _)| *level <= crate::abi::DPP_LOG_WARN)
            .map(|(_, m)| m)
            .collect();
        if mode == "inline" {
            assert!(errors.is_empty(), "{errors:?}");
        } else {
            assert_eq!(
                errors,
                [
                    "host_callback: a bug in the plugin: it called the callback, then returned an \
                  error (UNAVAILABLE: failed after calling it); the host's function ran, so the \
                  host is told the call succeeded and the error is dropped. Return Ok once the \
                  callback was called (an error means it never runs)"
                ]
            );
        }
        drop(s);
        dev.deallocate(a, 8);
    }
}

#[test]
fn two_hosts_are_independent() {
    let h1 = TestHost::new().with_option("devices", "1");
    let h2 = TestHost::new().with_option("devices", "4");
    std::thread::scope(|s| {
        let t1 = s.spawn(|| {
            h1.load(devplug_plugin_entry)
                .map(|p| p.platforms()[0].device_count)
        });
        let t2 = s.spawn(|| {
            h2.load(devplug_plugin_entry)
                .map(|p| p.platforms()[0].device_count)
        });
        assert_eq!(t1.join().expect("thread").expect("load"), 1);
        assert_eq!(t2.join().expect("thread").expect("load"), 4);
    });
}

#[test]
fn devices_are_usable_from_many_threads() {
    let host = TestHost::new().with_option("tag", "threads");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let dev = &dev;
            s.spawn(move || {
                for _ in 0..50 {
                    let a = dev.allocate(16).expect("a");
                    dev.memcpy_htod(a, &[t; 16]).expect("htod");
                    let mut out = [0u8; 16];
                    dev.memcpy_dtoh(&mut out, a).expect("dtoh");
                    assert_eq!(out, [t; 16]);
                    let err = dev.memcpy_dtoh(&mut out, DeviceAddr(1)).expect_err("bad");
                    assert!(
                        err.message().contains("0x1"),
                        "the error of this thread: {err}"
                    );
                    dev.deallocate(a, 16);
                }
            });
        }
    });
}

// ---- kernels --------------------------------------------------------------------------------

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A host older than ABI 1.3 refuses dtypes it does not know: the SDK registers a kernel
/// without f16 and bf16 there, leaves out (and drops) one that takes nothing else, and says so;
/// a 1.3 host gets the lists as given.
#[test]
fn half_dtypes_are_left_out_of_kernels_for_hosts_older_than_abi_1_3() {
    let dtypes = |plugin: &TestPlugin<'_>, op: &str| {
        plugin
            .kernels()
            .into_iter()
            .find(|k| k.op == op)
            .map(|k| k.dtypes)
    };
    let host = TestHost::new()
        .with_option("tag", "khalf12")
        .with_option("kernels", "halves")
        .with_abi_minor(2);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert_eq!(dtypes(&plugin, "Sub"), Some(vec![DType::F32]));
    assert_eq!(dtypes(&plugin, "Mul"), None, "Mul takes only halves");
    assert!(
        host.logs().iter().any(|(_, m)| m
            == "kernel Mul for TPU takes only f16/bf16, which a host of plugin ABI \
                1.2 does not know: not registered"),
        "{:?}",
        host.logs()
    );
    let p = probe("khalf12");
    assert_eq!(
        p.kernel_drops.load(Ordering::SeqCst),
        1,
        "the Mul left out is dropped at once"
    );
    drop(plugin);
    assert_eq!(p.kernel_drops.load(Ordering::SeqCst), 7);

    let host = TestHost::new()
        .with_option("tag", "khalf13")
        .with_option("kernels", "halves")
        .with_abi_minor(3);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert_eq!(
        dtypes(&plugin, "Sub"),
        Some(vec![DType::F16, DType::F32, DType::BF16])
    );
    assert_eq!(dtypes(&plugin, "Mul"), Some(vec![DType::BF16, DType::F16]));
}

#[test]
fn kernels_are_registered_with_their_binding_and_constraints() {
    let host = TestHost::new()
        .with_option("tag", "kreg")
        .with_option("kernels", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let k = plugin.kernels();
    let desc = |op: &str, platform: &str, dtypes: &[DType], priority| KernelDesc {
        op: op.into(),
        device_type: "TPU".into(),
        platform: platform.into(),
        dtypes: dtypes.to_vec(),
        priority,
    };
    assert_eq!(
        k,
        vec![
            desc("Add", TEST_PLATFORM, &[DType::F32], 0),
            desc("Attrs", TEST_PLATFORM, &[], 0),
            desc("Explode", TEST_PLATFORM, &[], 0),
            desc("Refuse", TEST_PLATFORM, &[], 0),
            desc("Count", "ANY", &[], 3),
        ]
    );
    let p = probe("kreg");
    drop(plugin);
    assert_eq!(
        p.kernel_drops.load(Ordering::SeqCst),
        5,
        "the kernels are dropped at shutdown"
    );
}

#[test]
fn a_kernel_round_trip_runs_on_the_devices_stream() {
    let host = TestHost::new()
        .with_option("tag", "kadd")
        .with_option("kernels", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = ([1.0f32, 2.0, 3.0, 4.5], [10.0f32, 20.0, 30.0, -4.5]);
    let t = |v: Option<&[f32]>| {
        let a = dev.allocate(16).expect("allocate");
        if let Some(v) = v {
            dev.memcpy_htod(a, &f32_bytes(v)).expect("upload");
        }
        KernelTensor::new(DType::F32, &[2, 2], a)
    };
    let (tx, ty, tz) = (t(Some(&x)), t(Some(&y)), t(None));
    s.run_kernel(
        "Add",
        &[tx.clone(), ty.clone()],
        std::slice::from_ref(&tz),
        &TestAttrs::new(),
    )
    .expect("Add");
    let mut out = vec![0u8; 16];
    dev.memcpy_dtoh(&mut out, tz.addr).expect("read early");
    assert_eq!(
        f32s(&out),
        [0.0; 4],
        "enqueued on the stream, not run inside compute"
    );
    s.synchronize().expect("sync");
    dev.memcpy_dtoh(&mut out, tz.addr).expect("read");
    assert_eq!(f32s(&out), [11.0, 22.0, 33.0, 0.0]);

    // The kernel's own checks are errors with its message.
    let mut wrong = tz.clone();
    wrong.shape = vec![4];
    let err = s
        .run_kernel(
            "Add",
            &[tx.clone(), ty.clone()],
            &[wrong],
            &TestAttrs::new(),
        )
        .expect_err("shape");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert!(
        err.message()
            .starts_with("kernel Add: wants f32 tensors of one shape, got f32[2, 2]"),
        "{err}"
    );
    let err = s
        .run_kernel(
            "Add",
            std::slice::from_ref(&tx),
            std::slice::from_ref(&tz),
            &TestAttrs::new(),
        )
        .expect_err("arity");
    assert_eq!(
        err.message(),
        "kernel Add: expects 2 input(s) and 1 output(s), got 1 and 1"
    );
    // f64 is not among the kernel's dtypes: no kernel.
    let mut f64x = tx.clone();
    f64x.dtype = DType::F64;
    let err = s
        .run_kernel(
            "Add",
            &[f64x, ty.clone()],
            std::slice::from_ref(&tz),
            &TestAttrs::new(),
        )
        .expect_err("no f64 kernel");
    assert_eq!(err.code(), Status::NotFound);
    // An error returned by a kernel.
    let err = s
        .run_kernel("Refuse", &[], &[], &TestAttrs::new())
        .expect_err("refuses");
    assert_eq!(err.code(), Status::Unimplemented);
    assert_eq!(
        err.message(),
        "kernel Refuse: Refuse refuses on purpose on Test Chip"
    );
    for t in [tx, ty, tz] {
        dev.deallocate(t.addr, 16);
    }
}

#[test]
fn the_highest_priority_kernel_wins() {
    let host = TestHost::new().with_option("kernels", "higher");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let a = KernelTensor::new(DType::F32, &[], DeviceAddr(0x1000));
    let err = s
        .run_kernel("Add", &[a.clone(), a.clone()], &[a], &TestAttrs::new())
        .expect_err("the priority-1 kernel");
    assert_eq!(err.message(), "kernel Add: the priority-1 Add ran");
}

#[test]
fn kernels_read_attributes_with_typed_errors() {
    let host = TestHost::new()
        .with_option("tag", "kattrs")
        .with_option("kernels", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let attrs = TestAttrs::new()
        .with("i", AttrValue::Int(3))
        .with("f", AttrValue::Float(2.5))
        .with("b", AttrValue::Bool(true))
        .with("v", AttrValue::Ints(vec![1, -2, 3]))
        .with("d", AttrValue::DType(DType::F64))
        .with("s", AttrValue::Str("SAME \u{e9}".into()))
        .with("empty", AttrValue::Str(String::new()));
    s.run_kernel("Attrs", &[], &[], &attrs).expect("Attrs");
    assert_eq!(
        *probe("kattrs").attr_reads.lock(),
        vec![
            "i=Ok(3)",
            "f=Ok(2.5)",
            "i as float=Ok(3.0)",
            "b=Ok(true)",
            "v=Ok([1, -2, 3])",
            "d=Ok(f64)",
            "s=Ok(\"SAME \u{e9}\")",
            "empty=Ok(\"\")",
            "i as string=InvalidArgument: kernel Attrs: attribute `i` is not of type string",
            "missing=NotFound: kernel Attrs: the op has no attribute `missing`",
            "i as bool=InvalidArgument: kernel Attrs: attribute `i` is not of type bool",
        ]
    );
}

#[test]
fn a_panicking_kernel_is_internal_with_the_message() {
    let host = TestHost::new()
        .with_option("tag", "kpanic")
        .with_option("kernels", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let err = s
        .run_kernel("Explode", &[], &[], &TestAttrs::new())
        .expect_err("panicked");
    assert_eq!(err.code(), Status::Internal);
    assert_eq!(
        err.message(),
        "kernel Explode: panicked: kernel exploded on purpose"
    );
    // The kernel, the device and the stream are still usable.
    let err = s
        .run_kernel("Explode", &[], &[], &TestAttrs::new())
        .expect_err("panicked again");
    assert_eq!(err.code(), Status::Internal);
    s.synchronize().expect("sync");
}

#[test]
fn an_any_kernel_sees_only_its_arguments() {
    let host = TestHost::new()
        .with_option("tag", "kany")
        .with_option("kernels", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 1).expect("device");
    let s = dev.create_stream().expect("stream");
    let t = KernelTensor::new(DType::U8, &[3], DeviceAddr(0x1000));
    s.run_kernel("Count", &[t.clone(), t], &[], &TestAttrs::new())
        .expect("Count");
    assert_eq!(*probe("kany").any_calls.lock(), vec![2]);
}

#[test]
fn refused_kernel_registrations_say_why() {
    let cases: [(&str, Status, &str); 7] = [
        (
            "conflict",
            Status::AlreadyExists,
            "kernel Add for TPU on TESTP (priority 0, dtypes [f64, f32]) conflicts with one already \
             registered (dtypes [f32]) (init then failed: the host refused kernel Add for TPU on \
             this plugin's platform (ALREADY_EXISTS, status 6; the host's dpp_kernel_t is the \
             KernelSpec: dpp_kernel_t.dtypes[i] is KernelSpec::dtypes[i]))",
        ),
        (
            "wrong_device",
            Status::InvalidArgument,
            "kernel Sub for TPU: platform TESTP's devices are devplug_plugin_sdk::tests::TDevice, \
             but the kernel takes a KernelContext of devplug_plugin_sdk::tests::NoDevice",
        ),
        (
            "any_bound",
            Status::InvalidArgument,
            "kernel Sub for TPU: a kernel bound to ANY runs on other plugins' devices; register \
             it with register_any_kernel",
        ),
        (
            "any_named",
            Status::InvalidArgument,
            "kernel Sub for TPU: register_any_kernel binds to ANY, not to platform TESTP; use \
             register_kernel",
        ),
        (
            "foreign",
            Status::InvalidArgument,
            "kernel Sub for TPU: platform NOPE is not a platform of type TPU that this plugin \
             registered (register the platform first)",
        ),
        (
            "other_type",
            Status::InvalidArgument,
            "kernel Sub for GPU: this plugin registered no platform of type GPU (register the \
             platform first)",
        ),
        (
            "ambiguous",
            Status::InvalidArgument,
            "kernel Add for TPU: this plugin registered 2 platforms of type TPU (TESTP, TESTQ); \
             name one in KernelSpec::platform",
        ),
    ];
    for (mode, code, message) in cases {
        let tag = format!("krefuse_{mode}");
        let mut host = TestHost::new()
            .with_option("tag", &tag)
            .with_option("kernels", mode);
        if mode == "ambiguous" {
            host = host.with_option("second_platform", "TESTQ");
        }
        let err = host.load(devplug_plugin_entry).expect_err(mode);
        assert_eq!(err.code(), code, "{mode}: {err}");
        assert_eq!(err.message(), message, "{mode}");
        // What the SDK refuses itself it logs as a warning when it refuses (the host never
        // sees it); what the host refuses the host reports.
        let warnings: Vec<String> = host
            .logs()
            .into_iter()
            .filter(|(level, _)| *level == crate::abi::DPP_LOG_WARN)
            .map(|(_, m)| m)
            .collect();
        let logged = format!("registration refused by the SDK, nothing was registered: {message}");
        if mode == "conflict" {
            assert!(warnings.is_empty(), "{mode}: {warnings:?}");
        } else {
            assert_eq!(warnings, [logged], "{mode}");
        }
        let p = probe(&tag);
        // "ambiguous" fails on the first kernel; the others after the five good ones.
        let registered = if mode == "ambiguous" { 0 } else { 5 };
        let refused = usize::from(mode == "conflict" || mode == "ambiguous");
        assert_eq!(
            p.kernel_drops.load(Ordering::SeqCst),
            registered + refused,
            "{mode}: every kernel closure was dropped (the refused one at once, the others when \
             the failed init was rolled back)"
        );
    }
}

/// A registration the SDK refuses never reaches the host: the SDK logs it (a warning, naming
/// the kernel) when it refuses, so a plugin that drops the `Err` does not lose the kernel
/// unseen.
#[test]
fn a_refusal_by_the_sdk_is_logged_even_when_init_ignores_it() {
    let host = TestHost::new()
        .with_option("tag", "kignored")
        .with_option("kernels", "ignored");
    let plugin = host.load(devplug_plugin_entry).expect("init went on");
    assert!(plugin.kernels().iter().all(|k| k.op != "Sub"));
    let warnings: Vec<_> = host
        .logs()
        .into_iter()
        .filter(|(level, _)| *level == crate::abi::DPP_LOG_WARN)
        .collect();
    assert_eq!(
        warnings,
        [(
            crate::abi::DPP_LOG_WARN,
            "registration refused by the SDK, nothing was registered: kernel Sub for GPU: this \
             plugin registered no platform of type GPU (register the platform first)"
                .to_owned()
        )]
    );
}

#[test]
fn ops_are_handed_to_the_host_with_their_text() {
    let host = TestHost::new().with_option("ops", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let ops = plugin.ops();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].name, "sdk_test.Swish");
    assert_eq!(ops[0].inputs, "x: T");
    assert_eq!(ops[0].outputs, "y: T");
    assert_eq!(ops[0].type_vars, "T: {f32, f64}");
    assert_eq!(ops[0].attrs, "");
    assert_eq!(ops[0].body, "s = Sigmoid(x); y = Mul(x, s)");
}

#[test]
fn refused_op_registrations_say_why() {
    let err = TestHost::new()
        .with_option("ops", "twice")
        .load(devplug_plugin_entry)
        .expect_err("twice");
    assert_eq!(err.code(), Status::AlreadyExists);
    assert_eq!(
        err.message(),
        "op sdk_test.Swish is registered twice (init then failed: the host refused op \
         sdk_test.Swish (ALREADY_EXISTS, status 6))"
    );
    let err = TestHost::new()
        .with_option("ops", "nul")
        .load(devplug_plugin_entry)
        .expect_err("nul");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert_eq!(err.message(), "op sdk_test.Bad: body contains a NUL");
}

// ---- temporary memory (ABI 1.4) -------------------------------------------------------------

/// Loads the test plugin with the `TempCopy` kernel into `host`, tagged `tag`.
fn temp_host(tag: &str) -> TestHost {
    TestHost::new()
        .with_option("tag", tag)
        .with_option("kernels", "temp")
}

fn allocations(tag: &str) -> i64 {
    probe(tag).allocations.load(Ordering::SeqCst)
}

#[test]
fn a_kernel_computes_through_temporary_memory_freed_once_the_stream_reaches_it() {
    for (tag, host) in [
        ("ktemp", temp_host("ktemp")),
        // The device's allocations are not 256-byte aligned: the host pads them.
        (
            "ktemp_skew",
            temp_host("ktemp_skew").with_option("misalign", "1"),
        ),
    ] {
        let plugin = host.load(devplug_plugin_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let s = dev.create_stream().expect("stream");
        let data: Vec<u8> = (1..=24).collect();
        let (x, y) = (dev.allocate(24).expect("x"), dev.allocate(24).expect("y"));
        dev.memcpy_htod(x, &data).expect("upload");
        let (tx, ty) = (
            KernelTensor::new(DType::U8, &[24], x),
            KernelTensor::new(DType::U8, &[24], y),
        );
        assert_eq!(allocations(tag), 2);
        let read_y = || {
            let mut out = vec![0u8; 24];
            dev.memcpy_dtoh(&mut out, y).expect("read");
            out
        };

        s.run_kernel(
            "TempCopy",
            std::slice::from_ref(&tx),
            std::slice::from_ref(&ty),
            &TestAttrs::new(),
        )
        .expect("TempCopy");
        assert_eq!(
            allocations(tag),
            4,
            "{tag}: the two temporaries live until the stream reaches the copies"
        );
        assert_eq!(read_y(), [0; 24], "{tag}: nothing ran inside compute");
        s.synchronize()
            .expect("the copies found their temporaries alive");
        assert_eq!(read_y(), data, "{tag}");
        assert_eq!(
            allocations(tag),
            2,
            "{tag}: freed after the synchronization"
        );
        assert_eq!(
            dev.memory_usage().expect("usage").free,
            MEMORY - 48,
            "{tag}: every byte came back"
        );

        // A kernel that fails after enqueuing work that uses its temporaries: they are kept
        // until the stream has run that work, then freed.
        dev.memset(y, 0, 24).expect("clear y");
        let fail = TestAttrs::new().with("fail", AttrValue::Bool(true));
        let err = s
            .run_kernel(
                "TempCopy",
                std::slice::from_ref(&tx),
                std::slice::from_ref(&ty),
                &fail,
            )
            .expect_err("fails on purpose");
        assert_eq!(err.code(), Status::FailedPrecondition);
        assert_eq!(allocations(tag), 4, "{tag}");
        s.synchronize().expect("sync");
        assert_eq!(read_y(), data, "{tag}: the enqueued copies ran");
        assert_eq!(allocations(tag), 2, "{tag}");

        // A stream destroyed without a synchronization frees them too.
        s.run_kernel("TempCopy", &[tx], &[ty], &TestAttrs::new())
            .expect("TempCopy");
        assert_eq!(allocations(tag), 4, "{tag}");
        drop(s);
        assert_eq!(
            allocations(tag),
            2,
            "{tag}: freed when the stream was destroyed"
        );
        dev.deallocate(x, 24);
        dev.deallocate(y, 24);
        assert_eq!(allocations(tag), 0, "{tag}: no leak");
    }
}

#[test]
fn allocate_temp_errors_reach_the_kernel() {
    let tag = "ktemp_errors";
    let host = temp_host(tag);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = (dev.allocate(8).expect("x"), dev.allocate(8).expect("y"));
    let (tx, ty) = (
        KernelTensor::new(DType::U8, &[8], x),
        KernelTensor::new(DType::U8, &[8], y),
    );
    let run = |temp_size: i64| {
        let attrs = TestAttrs::new().with("temp_size", AttrValue::Int(temp_size));
        s.run_kernel(
            "TempCopy",
            std::slice::from_ref(&tx),
            std::slice::from_ref(&ty),
            &attrs,
        )
        .expect_err("refused")
    };

    let err = run(0);
    assert_eq!(err.code(), Status::InvalidArgument);
    assert_eq!(
        err.message(),
        "kernel TempCopy: allocate_temp: the size is 0"
    );
    assert_eq!(allocations(tag), 2);

    // More than the device holds: the device's own RESOURCE_EXHAUSTED.
    let err = run(2 * MEMORY as i64);
    assert_eq!(err.code(), Status::ResourceExhausted);
    assert_eq!(
        err.message(),
        format!(
            "kernel TempCopy: allocate_temp: the device has no {} bytes free for temporary memory",
            2 * MEMORY
        )
    );
    assert_eq!(allocations(tag), 2, "nothing allocated on failure");

    // The first of the two fits, the second does not: the first is freed all the same.
    let err = run(MEMORY as i64 * 3 / 5);
    assert_eq!(err.code(), Status::ResourceExhausted);
    assert_eq!(
        allocations(tag),
        3,
        "the first temporary, until the stream is synchronized"
    );
    s.synchronize().expect("sync");
    assert_eq!(allocations(tag), 2);
    assert_eq!(dev.memory_usage().expect("usage").free, MEMORY - 16);
    dev.deallocate(x, 8);
    dev.deallocate(y, 8);
}

/// A host of ABI 1.3 has no allocate_temp: the kernel gets `Unimplemented`, saying so; its
/// other functions still work there.
#[test]
fn allocate_temp_is_unimplemented_in_an_abi_1_3_host() {
    let tag = "ktemp13";
    let host = temp_host(tag).with_abi_minor(3);
    let plugin = host
        .load(devplug_plugin_entry)
        .expect("the plugin declares 1.1");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = (dev.allocate(8).expect("x"), dev.allocate(8).expect("y"));
    let err = s
        .run_kernel(
            "TempCopy",
            &[KernelTensor::new(DType::U8, &[8], x)],
            &[KernelTensor::new(DType::U8, &[8], y)],
            &TestAttrs::new(),
        )
        .expect_err("no allocate_temp");
    assert_eq!(err.code(), Status::Unimplemented);
    assert_eq!(
        err.message(),
        "kernel TempCopy: the host has no allocate_temp function (plugin ABI 1.3, a 128-byte \
         dpp_host_api_t); temporary memory needs ABI 1.4"
    );
    s.synchronize().expect("sync");
    assert_eq!(allocations(tag), 2);

    // A 1.4 host has it.
    let host = temp_host("ktemp14").with_abi_minor(4);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = (dev.allocate(8).expect("x"), dev.allocate(8).expect("y"));
    s.run_kernel(
        "TempCopy",
        &[KernelTensor::new(DType::U8, &[8], x)],
        &[KernelTensor::new(DType::U8, &[8], y)],
        &TestAttrs::new(),
    )
    .expect("TempCopy");
    s.synchronize().expect("sync");
}

// ---- kernel states (ABI 1.5) ----------------------------------------------------------------

/// A host with the `Scale` kernel (a kernel with a state), tagged `tag`.
fn state_host(tag: &str) -> TestHost {
    TestHost::new()
        .with_option("tag", tag)
        .with_option("kernels", "state")
}

/// An f32 tensor of `values` on `dev`, and one of zeros of the same shape.
fn f32_pair(dev: &TestDevice<'_>, values: &[f32]) -> (KernelTensor, KernelTensor) {
    let n = values.len() as u64 * 4;
    let (x, y) = (dev.allocate(n).expect("x"), dev.allocate(n).expect("y"));
    dev.memcpy_htod(x, &f32_bytes(values)).expect("upload");
    dev.memset(y, 0, n).expect("clear");
    let shape = [values.len() as i64];
    (
        KernelTensor::new(DType::F32, &shape, x),
        KernelTensor::new(DType::F32, &shape, y),
    )
}

fn read_f32(dev: &TestDevice<'_>, t: &KernelTensor) -> Vec<f32> {
    let mut out = vec![0u8; t.byte_size as usize];
    dev.memcpy_dtoh(&mut out, t.addr).expect("read");
    f32s(&out)
}

fn factor(f: f64) -> TestAttrs {
    TestAttrs::new().with("factor", AttrValue::Float(f))
}

/// `create` runs once per device, input dtypes and attributes (given in any order), its state
/// reaches every launch with them, and each state is dropped exactly once: when the host lets
/// it go, or with its device.
#[test]
fn a_kernel_state_is_made_once_per_device_dtypes_and_attributes() {
    let tag = "kstate";
    let host = state_host(tag);
    let p = probe(tag);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let (dev, dev1) = (
        plugin.create_device(TEST_PLATFORM, 0).expect("device 0"),
        plugin.create_device(TEST_PLATFORM, 1).expect("device 1"),
    );
    let (s, s1) = (
        dev.create_stream().expect("stream"),
        dev1.create_stream().expect("stream 1"),
    );
    let (x, y) = f32_pair(&dev, &[1.0, -2.0, 3.5]);
    let (x1, y1) = f32_pair(&dev1, &[4.0]);
    let run = |s: &TestStream<'_>, x: &KernelTensor, y: &KernelTensor, attrs: &TestAttrs| {
        s.run_kernel(
            "Scale",
            std::slice::from_ref(x),
            std::slice::from_ref(y),
            attrs,
        )
    };
    // Two attributes, given in either order: one combination.
    let twice = factor(2.0).with("label", AttrValue::Str("a".into()));
    let twice_again = TestAttrs::new()
        .with("label", AttrValue::Str("a".into()))
        .with("factor", AttrValue::Float(2.0));
    for attrs in [&twice, &twice, &twice_again] {
        run(&s, &x, &y, attrs).expect("Scale x2");
    }
    s.synchronize().expect("sync");
    assert_eq!(read_f32(&dev, &y), [2.0, -4.0, 7.0]);
    assert_eq!(p.create_calls.load(Ordering::SeqCst), 1, "one combination");
    assert_eq!(
        *p.states_used.lock(),
        [1, 1, 1],
        "its state reached every launch"
    );

    // Another attribute value, another dtype, another device: a state each.
    run(&s, &x, &y, &factor(3.0)).expect("Scale x3");
    let xd = KernelTensor::new(DType::F64, &[1], dev.allocate(8).expect("f64 x"));
    let yd = KernelTensor::new(DType::F64, &[1], dev.allocate(8).expect("f64 y"));
    dev.memcpy_htod(xd.addr, &1.25f64.to_ne_bytes())
        .expect("upload");
    run(&s, &xd, &yd, &factor(2.0)).expect("Scale f64");
    run(&s1, &x1, &y1, &twice).expect("Scale on device 1");
    run(&s, &x, &y, &twice).expect("the first state again");
    s.synchronize().expect("sync");
    s1.synchronize().expect("sync");
    assert_eq!(read_f32(&dev, &y), [2.0, -4.0, 7.0]);
    assert_eq!(read_f32(&dev1, &y1), [8.0]);
    let mut out = [0u8; 8];
    dev.memcpy_dtoh(&mut out, yd.addr).expect("read");
    assert_eq!(f64::from_ne_bytes(out), 2.5);
    assert_eq!(
        *p.states_made.lock(),
        ["[f32] x2", "[f32] x3", "[f64] x2", "[f32] x2"]
    );
    assert_eq!(*p.states_used.lock(), [1, 1, 1, 2, 3, 4, 1]);
    assert_eq!((dev.kernel_states(), dev1.kernel_states()), (3, 1));
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 0, "all kept");

    // Let go (as the runtime's bound does): each dropped once; the next launch makes one anew.
    dev.release_kernel_states().expect("release");
    assert_eq!(dev.kernel_states(), 0);
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 3);
    run(&s, &x, &y, &twice).expect("Scale x2 again");
    assert_eq!(p.create_calls.load(Ordering::SeqCst), 5);
    assert_eq!(p.states_used.lock().last(), Some(&5));

    // The rest go with their devices, before the plugin shuts down.
    s.synchronize().expect("sync");
    drop((s, s1));
    for t in [&x, &y, &xd, &yd] {
        dev.deallocate(t.addr, t.byte_size);
    }
    drop(dev);
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 4);
    drop(dev1);
    assert_eq!(
        p.state_drops.load(Ordering::SeqCst),
        5,
        "one drop per create"
    );
    assert_eq!(p.kernel_drops.load(Ordering::SeqCst), 0);
    drop(plugin);
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 5);
    assert_eq!(
        p.kernel_drops.load(Ordering::SeqCst),
        6,
        "Scale's closures too"
    );
}

/// A `create` that fails fails the run with its code and message, the kernel named (as the
/// runtime says it), keeps nothing and runs again next time; one that panics is `INTERNAL`;
/// compute never runs without its state.
#[test]
fn a_failing_or_panicking_create_fails_the_run_naming_the_kernel() {
    let tag = "kstate_fail";
    let host = state_host(tag);
    let p = probe(tag);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = f32_pair(&dev, &[1.0]);
    let run = |attrs: &TestAttrs| {
        s.run_kernel(
            "Scale",
            std::slice::from_ref(&x),
            std::slice::from_ref(&y),
            attrs,
        )
        .expect_err("create fails")
    };
    let fail = factor(2.0).with("fail_create", AttrValue::Bool(true));
    for attempt in 1..=2 {
        let err = run(&fail);
        assert_eq!(err.code(), Status::FailedPrecondition);
        assert_eq!(
            err.message(),
            "kernel Scale: create: Scale refuses to make a state on purpose"
        );
        assert_eq!(
            p.create_calls.load(Ordering::SeqCst),
            attempt,
            "tried again"
        );
    }
    let err = run(&factor(2.0).with("panic_create", AttrValue::Bool(true)));
    assert_eq!(err.code(), Status::Internal);
    assert_eq!(
        err.message(),
        "kernel Scale: create: panicked: create exploded on purpose"
    );
    // An attribute create reads that the run lacks.
    let err = run(&TestAttrs::new());
    assert_eq!(err.code(), Status::NotFound);
    assert_eq!(
        err.message(),
        "kernel Scale: create: the op has no attribute `factor`"
    );
    let err = s
        .run_kernel("Scale", &[], &[], &factor(2.0))
        .expect_err("no input");
    assert_eq!(
        err.message(),
        "kernel Scale: create: no input 0 (the op got 0)"
    );
    assert_eq!(dev.kernel_states(), 0, "nothing kept");
    assert!(p.states_used.lock().is_empty(), "compute never ran");
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 0, "no state was made");
    // The kernel still works.
    s.run_kernel(
        "Scale",
        std::slice::from_ref(&x),
        std::slice::from_ref(&y),
        &factor(-1.0),
    )
    .expect("Scale");
    s.synchronize().expect("sync");
    assert_eq!(read_f32(&dev, &y), [-1.0]);
}

/// A host older than ABI 1.5 never calls `create` and passes 80-byte contexts without a state:
/// the SDK makes one for each launch and drops it once the stream reached the launch's work
/// (after synchronizing, when the device refuses the host callback that would do it), also
/// when compute fails or panics. Errors of `create` are the launch's.
#[test]
fn an_older_host_gets_a_state_made_per_launch_and_dropped_in_stream_order() {
    let tag = "kstate14";
    let host = state_host(tag).with_abi_minor(4);
    let p = probe(tag);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert!(
        host.logs()
            .iter()
            .any(|(level, m)| *level == crate::abi::DPP_LOG_DEBUG
                && m == "kernel Scale for TPU: a host of plugin ABI 1.4 keeps no kernel states: \
                     the SDK makes one for each launch"),
        "{:?}",
        host.logs()
    );
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = f32_pair(&dev, &[1.5, 2.0]);
    let run = |attrs: &TestAttrs| {
        s.run_kernel(
            "Scale",
            std::slice::from_ref(&x),
            std::slice::from_ref(&y),
            attrs,
        )
    };
    run(&factor(2.0)).expect("Scale");
    run(&factor(2.0)).expect("Scale");
    assert_eq!(p.create_calls.load(Ordering::SeqCst), 2, "one per launch");
    assert_eq!(*p.states_used.lock(), [1, 2]);
    assert_eq!(dev.kernel_states(), 0, "the host keeps none");
    assert_eq!(
        p.state_drops.load(Ordering::SeqCst),
        0,
        "dropped behind the work (the test device runs its stream when synchronized)"
    );
    s.synchronize().expect("sync");
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 2);
    assert_eq!(read_f32(&dev, &y), [3.0, 4.0]);

    // A compute that panics after enqueuing its work: INTERNAL, the state dropped after it.
    let err = run(&factor(10.0).with("panic_compute", AttrValue::Bool(true)))
        .expect_err("compute panics");
    assert_eq!(err.code(), Status::Internal);
    assert_eq!(
        err.message(),
        "kernel Scale: panicked: compute exploded on purpose"
    );
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 2);
    s.synchronize().expect("sync");
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 3);
    assert_eq!(
        read_f32(&dev, &y),
        [15.0, 20.0],
        "its work ran with its state's factor"
    );

    // create's errors are the launch's (this host has no create to name).
    let err = run(&factor(2.0).with("fail_create", AttrValue::Bool(true))).expect_err("fails");
    assert_eq!(err.code(), Status::FailedPrecondition);
    assert_eq!(
        err.message(),
        "kernel Scale: Scale refuses to make a state on purpose"
    );
    let err = run(&factor(2.0).with("panic_create", AttrValue::Bool(true))).expect_err("panics");
    assert_eq!(err.code(), Status::Internal);
    assert_eq!(
        err.message(),
        "kernel Scale: panicked: create exploded on purpose"
    );
    assert_eq!(
        p.states_used.lock().len(),
        3,
        "compute never ran without a state"
    );
    drop(s);
    for t in [&x, &y] {
        dev.deallocate(t.addr, t.byte_size);
    }

    // A device that refuses host callbacks: the SDK synchronizes the stream, then drops it.
    let tag = "kstate14_refuse";
    let host = state_host(tag)
        .with_abi_minor(4)
        .with_option("callback_mode", "refuse");
    let p = probe(tag);
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let (x, y) = f32_pair(&dev, &[1.0]);
    s.run_kernel(
        "Scale",
        std::slice::from_ref(&x),
        std::slice::from_ref(&y),
        &factor(5.0),
    )
    .expect("Scale");
    assert_eq!(p.state_drops.load(Ordering::SeqCst), 1, "dropped at once");
    assert_eq!(read_f32(&dev, &y), [5.0], "after its work ran");
    assert!(
        host.logs()
            .iter()
            .any(|(level, m)| *level == crate::abi::DPP_LOG_WARN
                && m == "kernel Scale: cannot drop the launch's state in stream order (the \
                     device's host_callback failed: callbacks refused on purpose); \
                     synchronizing the stream first"),
        "{:?}",
        host.logs()
    );
}
