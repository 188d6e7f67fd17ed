/* cwatch: notices a client that hangs up behind bytes nobody reads.
 *
 * A client connection (hconn) reads its client while a request is answered, so a FIN or a
 * reset is seen at once, until the bytes of a pipelined request fill the free room of its
 * buffer: then it stops reading (a level-triggered read event would fire for ever) and asks
 * a watch. The watch adds a second event on the same fd (EV_READ|EV_CLOSED) and confirms with
 * recv(MSG_PEEK); since a peek sees only the first unread byte, it asks the kernel for the
 * connection's TCP state (TCP_INFO). Behind unread bytes EV_READ would fire for ever too: the
 * watch then keeps EV_CLOSED (a FIN, at once) and asks TCP_INFO every 100 ms for a reset,
 * which epoll reports as an error that no close watch matches. */
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
