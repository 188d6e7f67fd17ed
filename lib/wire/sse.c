/* sse: event counting per the WHATWG event-stream rules (lines end in CR, LF or CRLF; a blank
 * line ends an event; a line "data" or "data:..." is a data line). */
#include "wire/sse.h"

#include <string.h>

void sse_init(struct sse_counter *c)
{
    memset(c, 0, sizeof *c);
}

/* Classifies the line that just ended. */
static void end_line(struct sse_counter *c)
{
    size_t hl = c->line_len < SSE_HEAD ? (size_t) c->line_len : SSE_HEAD;
    const char *h = c->head;

    if (hl >= 4 && memcmp(h, "data", 4) == 0 && (c->line_len == 4 || h[4] == ':')) {
        /* The value starts after the colon and one optional space. */
        size_t v = c->line_len > 5 && hl > 5 && h[5] == ' ' ? 6 : 5;
        int done = c->line_len == v + 6 && hl >= v + 6 && memcmp(h + v, "[DONE]", 6) == 0;
        if (!c->event_data)
            c->event_done = (uint8_t) done;
        else if (!done)
            c->event_done = 0;
        c->event_data = 1;
    }
    c->line_len = 0;
}

unsigned sse_feed(struct sse_counter *c, const char *p, size_t n)
{
    unsigned fresh = 0;

    for (size_t i = 0; i < n; i++) {
        char ch = p[i];

        if (ch == '\n' && c->last_cr) {
            c->last_cr = 0;
            continue;
        }
        c->last_cr = ch == '\r';
        if (ch == '\r' || ch == '\n') {
            if (c->line_len == 0) {
                /* A blank line dispatches the event. */
                if (c->event_data && !c->event_done) {
                    c->events++;
                    fresh++;
                }
                c->event_data = c->event_done = 0;
            } else {
                end_line(c);
            }
            continue;
        }
        if (c->line_len < SSE_HEAD)
            c->head[c->line_len] = ch;
        c->line_len++;
    }
    return fresh;
}
