/* engine_models: GET /v1/models answer -> model list (see engine_models.h). */
#include "admission/engine_models.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

enum engine_models_result engine_models_parse(const char *body, size_t len,
                                              struct admit_load_models *out, char *err,
                                              size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je), *data, *e;
    struct admit_load_models l;
    enum engine_models_result rv = ENGINE_MODELS_OK;
    size_t i;

    if (root == NULL) {
        snprintf(err, errlen, "not JSON: %s", je.text);
        return ENGINE_MODELS_INVALID;
    }
    data = json_object_get(root, "data");
    if (!json_is_array(data)) {
        snprintf(err, errlen, "no \"data\" array");
        json_decref(root);
        return ENGINE_MODELS_INVALID;
    }
    admit_load_models_clear(&l);
    json_array_foreach(data, i, e)
    {
        json_t *id = json_object_get(e, "id");

        if (!json_is_string(id)) {
            snprintf(err, errlen, "data[%zu] has no string \"id\"", i);
            json_decref(root);
            return ENGINE_MODELS_INVALID;
        }
        /* One name that cannot go (too long, control bytes, over the bounds) makes the list
         * unknown: a list without it would tell routers this worker does not serve it. */
        if (rv == ENGINE_MODELS_OK &&
            (strlen(json_string_value(id)) != json_string_length(id) ||
             admit_load_models_add(&l, json_string_value(id), json_string_length(id)) != 0)) {
            snprintf(err, errlen, "model \"%.64s\" does not fit a load message",
                     json_string_value(id));
            rv = ENGINE_MODELS_TOO_MANY;
        }
    }
    json_decref(root);
    if (rv == ENGINE_MODELS_TOO_MANY)
        admit_load_models_unknown(&l);
    *out = l;
    return rv;
}
