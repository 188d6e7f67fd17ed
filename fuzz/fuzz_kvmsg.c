/* libFuzzer harness for the kv_events message (wire/kvmsg.h): any bytes are survived; a
 * message the decoder takes is exactly as long as its keys say, within KVM_MSG_MAX, its keys
 * inside the input, and encoding what it decoded gives the same bytes back (the reserved
 * ones as 0); one the decoder refuses says why. */
#include "wire/kvmsg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvm_msg m;
    char err[128] = "";
    uint64_t keys[KVM_KEYS_MAX];
    unsigned char out[KVM_MSG_MAX];
    size_t len;

    if (kvm_decode(data, size, &m, err, sizeof err) != 0) {
        if (err[0] == '\0')
            abort();
        return 0;
    }
    if (size > KVM_MSG_MAX || size != KVM_HEADER + (size_t) m.n * 8 || m.keys != data + KVM_HEADER)
        abort();
    if (m.op < KVM_STORED || m.op > KVM_SNAPSHOT || (m.op == KVM_CLEARED && m.n != 0))
        abort();
    for (size_t i = 0; i < m.n; i++)
        keys[i] = kvm_key(&m, i);
    len = kvm_encode(&m, keys, out, sizeof out);
    if (len != size || memcmp(out, data, 36) != 0 || memcmp(out + 40, data + 40, size - 40) != 0)
        abort();
    if (out[36] | out[37] | out[38] | out[39])
        abort();
    return 0;
}
