/*
 * workers/common: --health-file, a liveness signal a supervisor can read
 * without talking to the program.
 *
 * A container's HEALTHCHECK (docker/), or any supervisor, asks "is this
 * worker or agent doing its job?".  The process being there does not say
 * so: ioa-worker may be looping on a Redis it cannot reach, ioa-agent on a
 * hub that refuses it.  So each program touches a file at the moments that
 * prove it works, and the check is the file's age alone:
 *
 *   ioa-worker  after every heartbeat Redis accepted (once a second while
 *               connected, busy or idle);
 *   ioa-agent   whenever its inbox stream delivers anything, the hub's
 *               keepalives included (every 15 s while connected).
 *
 * The touch is rate-limited to once a second, costs one open, futimens and
 * close, and never fails the program: a file that cannot be written is
 * reported once and the program goes on (the check then fails, which is
 * what an unwritable health file should do).
 */

#ifndef IOA_HEALTH_H
#define IOA_HEALTH_H


/* the file, or NULL for none (the default) */
void ioa_health_set(const char *path);

/* "working, now" */
void ioa_health_touch(void);


#endif /* IOA_HEALTH_H */
