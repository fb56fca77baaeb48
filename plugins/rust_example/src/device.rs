//! An RSIM device: the SDK's `Device` over [`Memory`] and worker-thread [`Stream`]s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use devplug_plugin_sdk::{
    Device, DeviceAddr, DeviceInfo, Error, EventStatus, HostBuf, HostBufMut, HostCallback, Logger,
    MemoryUsage, Result,
};
use parking_lot::Mutex;

use crate::memory::Memory;
use crate::stream::{Event, Stream, StreamShared};

/// One simulated device.
pub struct RsimDevice {
    name: String,
    memory: Arc<Mutex<Memory>>,
    streams: Mutex<Vec<Weak<StreamShared>>>,
    next_stream: AtomicU64,
    logger: Logger,
}

impl RsimDevice {
    /// Device `ordinal` of platform `platform`, with `memory` bytes.
    pub fn new(platform: &str, ordinal: i32, memory: u64, logger: Logger) -> Result<RsimDevice> {
        Ok(RsimDevice {
            name: format!("{platform}:{ordinal}"),
            memory: Arc::new(Mutex::new(Memory::new(ordinal, memory)?)),
            streams: Mutex::new(Vec::new()),
            next_stream: AtomicU64::new(0),
            logger,
        })
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

    /// Enqueues `job` on `stream` (its argument: whether the stream is in error).
    pub(crate) fn enqueue(
        &self,
        stream: &Stream,
        job: impl FnOnce(bool) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        stream
            .enqueue(Box::new(job))
            .map(drop)
            .map_err(|e| self.err(e))
    }
}

impl Device for RsimDevice {
    type Stream = Stream;
    type Event = Arc<Event>;

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

    fn create_stream(&self) -> Result<Stream> {
        let n = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let stream = Stream::new(format!("{}-stream{n}", self.name.to_lowercase()))
            .map_err(|e| self.err(e))?;
        let mut streams = self.streams.lock();
        streams.retain(|s| s.strong_count() > 0);
        streams.push(Arc::downgrade(stream.shared()));
        Ok(stream)
    }

    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        stream.shared().synchronize()
    }

    fn stream_wait_stream(&self, stream: &Stream, other: &Stream) -> Result<()> {
        if Arc::ptr_eq(stream.shared(), other.shared()) {
            return Ok(());
        }
        let other = Arc::clone(other.shared());
        let ticket = other.submitted();
        self.enqueue(stream, move |_| {
            other.wait_for(ticket);
            Ok(())
        })
    }

    fn memcpy_htod_async(&self, stream: &Stream, dst: DeviceAddr, src: HostBuf) -> Result<()> {
        self.check(dst, src.len() as u64)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move |_| {
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
        stream: &Stream,
        mut dst: HostBufMut,
        src: DeviceAddr,
    ) -> Result<()> {
        self.check(src, dst.len() as u64)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move |_| {
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
        stream: &Stream,
        dst: DeviceAddr,
        src: DeviceAddr,
        size: u64,
    ) -> Result<()> {
        self.check(src, size)?;
        self.check(dst, size)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move |_| {
            let mut m = memory.lock();
            let s = m.range(src, size)?;
            let d = m.range(dst, size)?;
            m.copy_within(s, d.start);
            Ok(())
        })
    }

    fn memset_async(&self, stream: &Stream, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        self.check(dst, size)?;
        let memory = Arc::clone(&self.memory);
        self.enqueue(stream, move |_| {
            let mut m = memory.lock();
            let r = m.range(dst, size)?;
            m.bytes_mut(r).fill(value);
            Ok(())
        })
    }

    fn host_callback(&self, stream: &Stream, callback: HostCallback) -> Result<()> {
        self.enqueue(stream, move |_| {
            callback.call();
            Ok(())
        })
    }

    fn create_event(&self) -> Result<Arc<Event>> {
        Ok(Arc::new(Event::default()))
    }

    fn record_event(&self, stream: &Stream, event: &Arc<Event>) -> Result<()> {
        let generation = event.begin_record();
        let marker = Arc::clone(event);
        let result = self.enqueue(stream, move |failed| {
            marker.reach(generation, failed);
            Ok(())
        });
        if result.is_err() {
            // Never reached by the stream: do not leave it pending forever.
            event.reach(generation, true);
        }
        result
    }

    fn event_status(&self, event: &Arc<Event>) -> Result<EventStatus> {
        Ok(event.status())
    }

    fn stream_wait_event(&self, stream: &Stream, event: &Arc<Event>) -> Result<()> {
        let generation = event.generation();
        if generation == 0 {
            return Ok(());
        }
        let event = Arc::clone(event);
        self.enqueue(stream, move |_| {
            event.wait_for(generation);
            Ok(())
        })
    }

    fn event_synchronize(&self, event: &Arc<Event>) -> Result<()> {
        event.wait_for(event.generation());
        Ok(())
    }

    fn synchronize_all(&self) -> Result<()> {
        let streams: Vec<_> = self
            .streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut first = Ok(());
        for s in streams {
            let r = s.synchronize();
            if first.is_ok() {
                first = r;
            }
        }
        first.map_err(|e| self.err(e))
    }
}
