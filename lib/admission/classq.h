/* classq: admit-router's policy-class queues, and the weighted deficit round robin that
 * dispatches them.
 *
 * When every worker that could take a request lacks room under its class's thresholds, the
 * router holds the request in the class's queue instead of answering 529 at once, and tries
 * the queues again each time its own booking drops. Classes share the fleet in proportion to
 * their quanta, measured in prompt tokens, the way NVIDIA Dynamo's policy queue does (so that
 * operators moving between the two see the same shares): deficit round robin across classes,
 * and within a class either arrival order (FCFS) or shortest prompt first (WSPT).
 *
 * Across classes (classq_dispatch), each step picks one entry:
 *  - the class that dispatched last goes on while it still has credit and its next head is
 *    ready and affordable (its deficit covers the head's cost): credit is not topped up.
 *    It keeps that turn while it has requests and credit, whatever ready() said in between:
 *    a step (or a whole call) in which it is not ready and no other class goes leaves the
 *    turn with it, so that under tight capacity, where every dispatch closes the gate until
 *    a request ends, the next opening still goes to it and the shares follow the quanta at
 *    any capacity, one request at a time included. The turn ends when its head costs more
 *    than its credit, when it runs out of credit or requests, or when another class goes;
 *  - otherwise the ring is walked once from the class after the last to dispatch. A class
 *    whose head is ready dispatches on the credit it has if that covers the head, else earns
 *    one quantum for the visit and dispatches if that is enough;
 *  - when a whole ring made no progress only for want of credit, every ready class earns at
 *    once the same number of virtual rounds, the fewest that make some head affordable
 *    (min of ceil((cost - deficit) / quantum)), and the first affordable class in ring order
 *    dispatches: a head much larger than its quantum costs one step, not cost/quantum of them;
 *  - a class that is not ready (ready() says no) keeps its credit and earns none, so a class
 *    cannot bank credit while it waits and flood the fleet when it unblocks; an empty class's
 *    credit is reset to 0 (it cannot save for later either);
 *  - dispatching takes the head's cost from the class's deficit.
 * The call repeats steps until no non-empty class is ready. ready() is asked about the
 * current head of a class each time the step needs it, never about an empty class, and
 * answered from the state at that moment (go() books synchronously, so the next answer sees
 * the booking); the same head may be asked about more than once in one call.
 *
 * A request's cost is max(1, prompt tokens), frozen when it is queued. A class's queue is
 * full when it already holds limit_per_worker x max(1, routable workers) entries (the entry
 * that reaches the limit is accepted, the next one refused). The max(1, ...) keeps a bounded
 * queue of one worker's worth while no worker is routable (all skipped after overload
 * answers, say): a limit of 0 would turn every arrival into a 529 at the moment the fleet is
 * busiest, which is what the queue is for.
 *
 * Entries are embedded by the caller in its per-request state and owned by it; the queue
 * never frees them. FCFS classes are intrusive lists; WSPT classes are binary heaps of entry
 * pointers whose array grows by doubling and never shrinks, so operations allocate only when
 * a heap outgrows every size it had before. Pure: no sockets, no clock. Not thread-safe. */
#ifndef ADMIT_CLASSQ_H
#define ADMIT_CLASSQ_H

#include <stddef.h>
#include <stdint.h>

/* Order within a class. */
enum classq_policy {
    CLASSQ_FCFS, /* arrival order; nobody overtakes */
    CLASSQ_WSPT  /* smallest cost first, ties by arrival */
};

/* One class, as configured. */
struct classq_def {
    int64_t quantum;           /* DRR credit per ring visit, in prompt tokens; >= 1 */
    enum classq_policy policy; /* order within the class */
    unsigned limit_per_worker; /* queued entries per routable worker; 0 = no limit */
};

/* A caller-embedded queue entry; zero-initialised means never queued. Members starting with
 * '_' are private to the queue: read them through the functions below, never write them. */
struct classq_entry {
    union {
        struct {
            struct classq_entry *prev, *next;
        } _list;     /* FCFS: the class's list, oldest first */
        size_t _pos; /* WSPT: the index in the class's heap */
    } _at;
    uint64_t _seq; /* arrival order over all classes */
    int64_t _cost; /* max(1, prompt tokens) at the last push; 0 = never pushed */
    int _class;    /* the class of the last push */
    int _queued;   /* 1 while in a queue */
};

struct classq;

/** called by classq_dispatch: may the head of class cls go now? Must not change the queue */
typedef int (*classq_ready_fn)(void *arg, int cls, const struct classq_entry *head);
/** called by classq_dispatch with an entry it has just taken out of its queue (e is no longer
 *  queued); may push and remove entries, e included (pushed again, it is a new arrival) */
typedef void (*classq_go_fn)(void *arg, struct classq_entry *e);

/** creates empty queues for nclasses (>= 1) classes of defs (copied); NULL when nclasses is 0,
 *  a quantum is < 1 or a policy is unknown */
struct classq *classq_new(const struct classq_def *defs, size_t nclasses);
/** frees the queues; entries still queued are forgotten (not touched: their owners may be
 *  gone) */
void classq_free(struct classq *q);
/** number of classes */
size_t classq_nclasses(const struct classq *q);

/** queues e at the back of class cls (FCFS) or by its cost (WSPT), with cost
 *  max(1, prompt_tokens) frozen now. 0, or -1 with e untouched when the class is full (see
 *  classq_limit), cls is out of range or e is already queued */
int classq_push(struct classq *q, int cls, struct classq_entry *e, int64_t prompt_tokens,
                unsigned routable_workers);
/** takes every entry out of q into out (room for classq_total(q) of them), oldest arrival
 *  first whatever its class; returns how many. Each keeps its class and cost (classq_class_of,
 *  classq_cost_of); q stays as it was, empty. A reload moves the entries so into a queue of
 *  the new classes (classq_requeue) */
size_t classq_drain(struct classq *q, struct classq_entry **out);
/** queues e, which was queued before (taken out by classq_drain or classq_remove), in class
 *  cls with the cost it had: as classq_push but never refused for a full class, so that a
 *  reload that lowers a limit keeps every entry that waits (the limit turns newcomers away
 *  until the class fits). Entries requeued in their arrival order keep it. 0, or -1 with e
 *  untouched when cls is out of range, e is queued or was never pushed */
int classq_requeue(struct classq *q, int cls, struct classq_entry *e);
/** takes e out of its queue (cancel, timeout); a no-op when e is not queued. O(1) for FCFS,
 *  O(log n) for WSPT. A class left empty loses its credit */
void classq_remove(struct classq *q, struct classq_entry *e);
/** the entries class cls may hold with routable_workers routable: limit_per_worker x
 *  max(1, routable_workers), saturated at SIZE_MAX; 0 = no limit (or cls out of range) */
size_t classq_limit(const struct classq *q, int cls, unsigned routable_workers);

/** 1 while e is queued */
int classq_queued(const struct classq_entry *e);
/** the class of e's last successful push (kept after it leaves, so that go() can tell);
 *  -1 for an entry never pushed */
int classq_class_of(const struct classq_entry *e);
/** e's cost, frozen at its last successful push; 0 for an entry never pushed */
int64_t classq_cost_of(const struct classq_entry *e);

/** entries queued in class cls (0 when out of range) */
size_t classq_depth(const struct classq *q, int cls);
/** entries queued in every class */
size_t classq_total(const struct classq *q);
/** the head of class cls, the next it would dispatch (NULL if empty or out of range) */
const struct classq_entry *classq_head(const struct classq *q, int cls);
/** class cls's DRR credit, in prompt tokens (for tests and metrics; 0 when out of range) */
int64_t classq_deficit(const struct classq *q, int cls);

/** dispatches in weighted deficit round robin, as this file's head says, until no non-empty
 *  class is ready: each entry is taken out of its queue, its cost taken from its class's
 *  credit, then handed to go(arg, e). Returns the number dispatched. go() may push and remove
 *  any entry (the next step reads the queues afresh); an entry it pushes may be dispatched in
 *  the same call, so a go() that pushes back every entry it is given, under a ready() that
 *  keeps saying yes, never lets the call end. A call made from inside go() or ready() returns
 *  0 at once: the outer call goes on with whatever changed */
unsigned classq_dispatch(struct classq *q, classq_ready_fn ready, classq_go_fn go, void *arg);

#endif
