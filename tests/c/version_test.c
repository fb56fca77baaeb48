/* dp_version() reports the version this test was written for (0.1.0), and
 * dp_version_compatible() accepts this header's version and refuses another minor (the major
 * is 0). Built as C and as C++. */
#include <stdint.h>
#include <stdio.h>

#include <devplug/devplug.h>

int main(void) {
    const uint32_t expected = (0u << 16) | (1u << 8) | 0u;
    const uint32_t got = dp_version();
    if (got != expected) {
        fprintf(stderr, "dp_version() = 0x%06x, expected 0x%06x\n", (unsigned)got,
                (unsigned)expected);
        return 1;
    }
    if (!dp_version_compatible(DP_VERSION_MAJOR, DP_VERSION_MINOR)) {
        fprintf(stderr, "dp_version_compatible refuses the header's own version\n");
        return 1;
    }
    if (dp_version_compatible(0, 2) || dp_version_compatible(0, 0) ||
        dp_version_compatible(1, 1)) {
        fprintf(stderr, "dp_version_compatible accepts 0.2, 0.0 or 1.1 for a 0.1 library\n");
        return 1;
    }
    printf("dp_version() = %u.%u.%u\n", (unsigned)(got >> 16), (unsigned)((got >> 8) & 0xffu),
           (unsigned)(got & 0xffu));
    return 0;
}
