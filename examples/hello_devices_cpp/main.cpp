// hello_devices (C++17): lists devplug's devices, round-trips 1 MiB through device memory on
// two streams ordered by an event, and runs an op placed by a device scope, using the
// header-only wrapper devplug/devplug.hpp.
#include <devplug/devplug.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

int main() {
  try {
    // ---- versions: the header we compiled against and the library we run with ----
    const devplug::AbiVersion abi = devplug::abi_version();
    std::printf("devplug %s (library %s, header %s, plugin ABI %u.%u)\n",
                devplug::version_string().c_str(), devplug::version().to_string().c_str(),
                devplug::header_version().to_string().c_str(), abi.major, abi.minor);
    if (!devplug::version_compatible()) {
      std::fprintf(stderr, "hello_devices: the library does not match the header\n");
      return 1;
    }

    // The runtime is declared first, so it is destroyed after everything made from it.
    devplug::Runtime runtime;

    // ---- every device and its properties ----
    const std::vector<devplug::Device> devices = runtime.devices();
    std::printf("%zu device(s):\n", devices.size());
    for (const devplug::Device& d : devices) {
      const devplug::DeviceProperties p = d.properties();
      std::printf("  %-8s type %s, platform %s (priority %d%s), vendor \"%s\", hardware \"%s\", "
                  "memory %llu B%s\n",
                  p.name.c_str(), p.device_type.c_str(), p.platform.c_str(), static_cast<int>(p.priority),
                  p.is_active_platform ? ", active" : "", p.vendor.c_str(),
                  p.hardware_name.c_str(), static_cast<unsigned long long>(p.total_memory),
                  p.host_visible ? ", host-visible" : "");
    }
    if (devices.empty()) {
      std::fprintf(stderr, "hello_devices: no devices\n");
      return 1;
    }
    const devplug::Device device = devices.front();

    // ---- 1 MiB of patterned bytes through device memory ----
    const size_t size = size_t{1} << 20;
    std::vector<uint8_t> source(size);
    for (size_t i = 0; i < size; ++i) source[i] = static_cast<uint8_t>(i * 131u + (i >> 12));
    std::vector<uint8_t> result(size, 0);

    devplug::Buffer buffer = device.allocate(size);
    devplug::Stream producer = device.create_stream();
    devplug::Stream consumer = device.create_stream();
    devplug::Event written = device.create_event();

    producer.write(buffer, source);  // host -> device (source outlives the stream's work)
    producer.record(written);        // the point where the data is in place
    consumer.wait(written);          // the consumer starts only after it
    consumer.read(buffer, result);   // device -> host
    consumer.synchronize();

    for (size_t i = 0; i < size; ++i) {
      if (result[i] != source[i]) {
        std::fprintf(stderr, "hello_devices: byte %zu is 0x%02x, expected 0x%02x\n", i,
                     result[i], source[i]);
        return 1;
      }
    }
    std::printf("round trip of %zu bytes through %s: verified\n", size, device.name().c_str());

    // ---- an op placed by a device scope: no device named, the scope decides ----
    {
      const devplug::DeviceScope on_device = runtime.device_scope(device);
      const devplug::ScopeGuard entered(on_device);  // until the end of this block
      const devplug::Tensor a = devplug::Tensor::from_vector<float>(device, {4}, {1, 2, 3, 4});
      const devplug::Tensor sum = runtime.run1(runtime.op("Add"), {&a, &a});
      const std::vector<float> got = sum.to_vector<float>();
      if (!(sum.device() == device) || got != std::vector<float>({2, 4, 6, 8})) {
        std::fprintf(stderr, "hello_devices: Add under a device scope went wrong\n");
        return 1;
      }
      std::printf("Add placed by a device scope on %s: [%g, %g, %g, %g]\n", sum.device().name().c_str(),
                  got[0], got[1], got[2], got[3]);
    }

    const devplug::MemoryStats s = device.memory_stats();
    std::printf("memory stats of %s: in use %llu B, peak %llu B, allocations %llu (active %llu), "
                "largest %llu B, limit %llu B, reserved %llu B, largest free block %llu B\n",
                device.name().c_str(), static_cast<unsigned long long>(s.bytes_in_use),
                static_cast<unsigned long long>(s.peak_bytes_in_use),
                static_cast<unsigned long long>(s.num_allocs),
                static_cast<unsigned long long>(s.active_allocs),
                static_cast<unsigned long long>(s.largest_alloc_size),
                static_cast<unsigned long long>(s.bytes_limit),
                static_cast<unsigned long long>(s.bytes_reserved),
                static_cast<unsigned long long>(s.largest_free_block));
  } catch (const devplug::Error& e) {
    // what() is "STATUS_NAME: message"
    std::fprintf(stderr, "hello_devices: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hello_devices: %s\n", e.what());
    return 1;
  }
  std::printf("hello_devices: OK\n");
  return 0;
}
