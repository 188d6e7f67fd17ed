/* buildinfo: the --version text (see util/buildinfo.h).
 *
 * jansson and libyaml are named here since every program links them through this layer;
 * jansson tells its run-time version since 2.13 (jansson_version_str), libyaml always has. */
#include "util/buildinfo.h"

#include <jansson.h>
#include <stdio.h>
#include <yaml.h>

int buildinfo_format(char *buf, size_t cap, const char *prog, const struct buildinfo_lib *libs,
                     size_t n)
{
    const struct buildinfo_lib always[] = {{"jansson", jansson_version_str()},
                                           {"libyaml", yaml_get_version_string()}};
    const struct buildinfo *b = &buildinfo;
    size_t len;
    int w;

    if (cap == 0)
        return -1;
    w = snprintf(buf, cap,
                 "%s %s (commit %s)\nbuilt with %s, meson %s, buildtype %s, sanitizers %s\n"
                 "libraries:",
                 prog, b->version, b->commit, b->compiler, b->meson, b->buildtype, b->sanitizers);
    if (w < 0 || (size_t) w >= cap)
        return -1;
    len = (size_t) w;
    for (size_t i = 0; i < n + 2; i++) {
        const struct buildinfo_lib *l = i < n ? &libs[i] : &always[i - n];

        w = snprintf(buf + len, cap - len, "%s %s %s", i ? "," : "", l->name,
                     l->version != NULL ? l->version : "unknown");
        if (w < 0 || (size_t) w >= cap - len)
            return -1;
        len += (size_t) w;
    }
    if (len + 2 > cap) /* the line's end and the NUL */
        return -1;
    buf[len++] = '\n';
    buf[len] = '\0';
    return (int) len;
}

int buildinfo_print(FILE *out, const char *prog, const struct buildinfo_lib *libs, size_t n)
{
    char text[1024];
    int len = buildinfo_format(text, sizeof text, prog, libs, n);

    if (len < 0 || fwrite(text, 1, (size_t) len, out) != (size_t) len)
        return -1;
    return 0;
}
