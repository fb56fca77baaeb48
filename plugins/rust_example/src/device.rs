//! An RSIM device: the SDK's `Device` over [`Memory`] and the SDK's worker-thread streams
//! and events ([`devplug_plugin_sdk::worker`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use devplug_plugin_sdk::worker::{WorkerEvent, WorkerStream, WorkerStreams};
use devplug_plugin_sdk::{
    Device, DeviceAddr, DeviceInfo, Error, EventStatus, HostBuf, HostBufMut, HostCallback, Logger,
    MemoryUsage, Result,
};
use parking_lot::Mutex;

use crate::kernels::StateCount;
use crate::memory::Memory;

/// One simulated device.
pub struct RsimDevice {
    name: String,
    memory: Arc<Mutex<Memory>>,
    streams: WorkerStreams,
    logger: Logger,
    /// The kernel states (ABI 1.5) made for this device and not yet dropped.
    states: Arc<StateCount>,
}

impl RsimDevice {
    /// Device `ordinal` of platform `platform`, with `memory` bytes.
    pub fn new(platform: &str, ordinal: i32, memory: u64, logger: Logger) -> Result<RsimDevice> {
        let name = format!("{platform}:{ordinal}");
        Ok(RsimDevice {
            memory: Arc::new(Mutex::new(Memory::new(ordinal, memory)?)),
            // Stream threads: `rsim:0-stream<n>`.
            streams: WorkerStreams::new(name.to_lowercase()),
            states: Arc::new(StateCount::new(&name, logger.clone())),
            name,
            logger,
        })
    }

    /// Logs each kernel state made for the device and dropped, with the number alive (load
    /// option `log_kernel_states`).
    pub(crate) fn log_kernel_states(mut self, on: bool) -> RsimDevice {
        self.states = Arc::new(StateCount::new(&self.name, self.logger.clone()).logged(on));
        self
    }

    /// The count of the device's kernel states (their `create` adds one, their drop takes it
    /// back).
    pub(crate) fn kernel_states(&self) -> &Arc<StateCount> {
        &self.states
    }

    /// `e` with the device's name in front of its message.
    pub(crate) fn err(&self, e: Error) -> Error {
        e.context(&self.name)
    }

    /// The device's memory (for stream work).
    pub(crate) fn memory(&self) -> Arc<Mutex<Memory>> {
        Arc::clone(&self.memory)
    }

    /// Checks `[addr, addr + size)` now, so that a bad address fails the call itself.
    pub(crate) fn check(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        self.memory
            .lock()
            .range(addr, size)
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Enqueues `job` on `stream`.
    pub(crate) fn enqueue(
        &self,
        stream: &WorkerStream,
        job: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<()> {
        stream.enqueue(job).map_err(|e| self.err(e))
    }
}

impl Drop for RsimDevice {
    fn drop(&mut self) {
        // The host destroys every kernel state before it destroys the device (ABI 1.5).
        let live = self.states.live.load(Ordering::SeqCst);
        if live > 0 {
            self.logger.error(format!(
                "{}: {live} kernel state(s) never destroyed before destroy_device",
                self.name
            ));
        }
    }
}

impl Device for RsimDevice {
    type Stream = WorkerStream;
    type Event = WorkerEvent;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            hardware_name: Some("RSIM simulated accelerator".to_owned()),
            vendor: Some("devplug".to_owned()),
            total_memory: self.memory.lock().total(),
            compute_units: 1,
            ..DeviceInfo::default()
        }
    }

    fn allocate(&self, size: u64) -> Result<DeviceAddr> {
        self.memory.lock().allocate(size).map_err(|e| self.err(e))
    }

    fn deallocate(&self, addr: DeviceAddr, size: u64) {
        // No status to return: a bad free is logged.
        if let Err(e) = self.memory.lock().deallocate(addr, size) {
            self.logger.error(self.err(e));
        }
    }

    fn provides_memory_usage(&self) -> bool {
        true
    }

    fn memory_usage(&self) -> Result<MemoryUsage> {
        Ok(self.memory.lock().usage())
    }

    fn memcpy_htod(&self, dst: DeviceAddr, src: &[u8]) -> Result<()> {
        let mut m = self.memory.lock();
        let r = m.range(dst, src.len() as u64).map_err(|e| self.err(e))?;
        m.bytes_mut(r).copy_from_slice(src);
        Ok(())
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DeviceAddr) -> Result<()> {
        let m = self.memory.lock();
        let r = m.range(src, dst.len() as u64).map_err(|e| self.err(e))?;
        dst.copy_from_slice(m.bytes(r));
        Ok(())
    }

    fn memcpy_dtod(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()> {
        let mut m = self.memory.lock();
        let s = m.range(src, size).map_err(|e| self.err(e))?;
        let d = m.range(dst, size).map_err(|e| self.err(e))?;
        m.copy_within(s, d.start);
        Ok(())
    }

    fn memset(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        let mut m = self.memory.lock();
        let r = m.range(dst, size).map_err(|e| self.err(e))?;
        m.bytes_mut(r).fill(value);
        Ok(())
    }

    fn create_stream(&self) -> Result<WorkerStream> {
        self.streams.create().map_err(|e| self.err(e))
    }

    fn synchronize_stream(&self, stream: &WorkerStream) -> Result<()> {
        stream.synchronize()
    }

    fn stream_wait_stream(&self, stream: &WorkerStream, other: &WorkerStream) -> Result<()> {
        stream.wait_stream(other).map_err(|e| self.err(e))
    }

    fn memcpy_htod_async(
        &self,
        stream: &WorkerStream,
        dst: DeviceAddr,
        src: HostBuf,
    ) -> Result<()> {
        self.check(dst, src.len() as u64)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move || {
            let mut m = memory.lock();
            let r = m.range(dst, src.len() as u64)?;
            // SAFETY: this job is the stream executing the copy, in stream order, and the
            // method that received `src` succeeded.
            let bytes = unsafe { src.as_slice() };
            m.bytes_mut(r).copy_from_slice(bytes);
            Ok(())
        })
    }

    fn memcpy_dtoh_async(
        &self,
        stream: &WorkerStream,
        mut dst: HostBufMut,
        src: DeviceAddr,
    ) -> Result<()> {
        self.check(src, dst.len() as u64)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move || {
            let m = memory.lock();
            let r = m.range(src, dst.len() as u64)?;
            // SAFETY: this job is the stream executing the copy, in stream order, and the
            // method that received `dst` succeeded.
            let out = unsafe { dst.as_mut_slice() };
            out.copy_from_slice(m.bytes(r));
            Ok(())
        })
    }

    fn memcpy_dtod_async(
        &self,
        stream: &WorkerStream,
        dst: DeviceAddr,
        src: DeviceAddr,
        size: u64,
    ) -> Result<()> {
        self.check(src, size)?;
        self.check(dst, size)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move || {
            let mut m = memory.lock();
            let s = m.range(src, size)?;
            let d = m.range(dst, size)?;
            m.copy_within(s, d.start);
            Ok(())
        })
    }

    fn memset_async(
        &self,
        stream: &WorkerStream,
        dst: DeviceAddr,
        value: u8,
        size: u64,
    ) -> Result<()> {
        self.check(dst, size)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move || {
            let mut m = memory.lock();
            let r = m.range(dst, size)?;
            m.bytes_mut(r).fill(value);
            Ok(())
        })
    }

    fn host_callback(&self, stream: &WorkerStream, callback: HostCallback) -> Result<()> {
        stream.host_callback(callback).map_err(|e| self.err(e))
    }

    fn create_event(&self) -> Result<WorkerEvent> {
        Ok(WorkerEvent::new())
    }

    fn record_event(&self, stream: &WorkerStream, event: &WorkerEvent) -> Result<()> {
        stream.record(event).map_err(|e| self.err(e))
    }

    fn event_status(&self, event: &WorkerEvent) -> Result<EventStatus> {
        Ok(event.status())
    }

    fn stream_wait_event(&self, stream: &WorkerStream, event: &WorkerEvent) -> Result<()> {
        stream.wait_event(event).map_err(|e| self.err(e))
    }

    fn event_synchronize(&self, event: &WorkerEvent) -> Result<()> {
        event.synchronize()
    }

    fn synchronize_all(&self) -> Result<()> {
        self.streams.synchronize_all().map_err(|e| self.err(e))
    }
}
