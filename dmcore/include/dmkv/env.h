/* Environment switches read once per process (tests and benchmarks turn features off). */
#ifndef DMKV_ENV_H
#define DMKV_ENV_H

/* parse(getenv(name)) (NULL when unset; must return >= 0), computed on the first call and
 * kept in *cache, which starts at -1. Loads and stores are atomic: every worker thread may
 * call it at once (a plain int here is a data race ThreadSanitizer reports). */
int dm_env_cached(int *cache, const char *name, int (*parse)(const char *value));

#endif
