/* nngver: which nng a program runs with, for its --version (util/buildinfo.h). Here because
 * only lib/pubsub includes nng. */
#ifndef ADMIT_NNGVER_H
#define ADMIT_NNGVER_H

/** the version of the nng library loaded, as nng_version() gives it ("1.5.2") */
const char *nngver_runtime(void);

#endif
