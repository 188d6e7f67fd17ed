/* cwatch: notices a client that hangs up while its request waits.
 *
 * libevent 2.1's evhttp disables reading on a connection once a request has been read and
 * only re-enables it when the reply starts, so nothing sees a client leave while its request
 * is queued or waiting for the engine's first byte. cwatch adds a second, level-triggered
 * event on the same fd (EV_READ|EV_CLOSED) and confirms with recv(MSG_PEEK): EV_CLOSED
 * alone misses a reset, which epoll reports as an error mapped to EV_READ. Once unread bytes
 * wait (a pipelined request), EV_READ would fire for ever: the watch keeps EV_CLOSED (a FIN,
 * at once) and asks TCP_INFO every 100 ms for a reset behind the bytes. */
#ifndef ADMIT_CWATCH_H
#define ADMIT_CWATCH_H

struct event_base;
struct cwatch;

/** called once when the peer has closed or reset; the watcher is already disarmed */
typedef void (*cwatch_cb)(void *arg);

/** starts watching fd for hang-up; never fails (allocation failure aborts) */
struct cwatch *cwatch_new(struct event_base *base, int fd, cwatch_cb cb, void *arg);
/** stops watching and frees; must run before the fd is closed; NULL is a no-op */
void cwatch_free(struct cwatch *w);
/** 1 if the peer's close (FIN) or reset already sits in the socket, whether or not the event
 *  loop has reported it yet; 0 if not, or if unread bytes hide what follows them */
int cwatch_peer_gone(int fd);

#endif
