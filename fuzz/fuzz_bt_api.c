/* libFuzzer harness for the /busy_threshold endpoint: any POST body gets one of the documented
 * statuses and a response that is a JSON object (with "error" on every failure). */
#include "admission/bt_api.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct bt_registry *r;
    struct busy_thresholds d;
    struct buf out;
    json_error_t je;
    json_t *j;
    int status;

    /* One registry for the whole run, so sets accumulate as they would in a live router. */
    if (r == NULL) {
        busy_thresholds_unset(&d);
        d.active_decode_blocks_threshold = 0.9;
        d.active_prefill_tokens_threshold = 1000;
        r = bt_registry_new(&d);
        bt_registry_add_model(r, "m");
        bt_registry_add_model(r, "llama");
    }
    buf_init(&out);
    status = bt_api_handle(r, "POST", "application/json", (const char *) data, size, &out);
    if (status != 200 && status != 400 && status != 404 && status != 413 && status != 415 &&
        status != 422)
        abort();
    j = out.data ? json_loadb(out.data, out.len, JSON_ALLOW_NUL, &je) : NULL;
    if (j == NULL || !json_is_object(j) ||
        (status != 200 && !json_is_string(json_object_get(j, "error"))))
        abort();
    json_decref(j);
    /* The list must stay well-formed whatever was set. */
    status = bt_api_handle(r, "GET", NULL, NULL, 0, &out);
    j = json_loadb(out.data, out.len, 0, &je);
    if (status != 200 || j == NULL || !json_is_array(json_object_get(j, "thresholds")))
        abort();
    json_decref(j);
    buf_free(&out);
    return 0;
}
