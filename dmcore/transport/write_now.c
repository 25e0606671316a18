/* dmkv/write_now.h: a uv_try_write that leaves the unwritten rest for uv_write. */
#include "dmkv/write_now.h"

#include <string.h>

int dm_write_now(uv_stream_t *s, uv_buf_t *bufs, unsigned *nbufs)
{
    size_t total = 0;
    for (unsigned i = 0; i < *nbufs; i++)
        total += bufs[i].len;
    int n = uv_try_write(s, bufs, *nbufs);
    if (n == UV_EAGAIN || n == UV_ENOSYS) return 0;
    if (n < 0) return n;
    if ((size_t)n == total) return 1;
    size_t skip = (size_t)n;
    unsigned first = 0;
    while (skip >= bufs[first].len) /* n < total: some buffer is left */
        skip -= bufs[first++].len;
    bufs[first].base += skip;
    bufs[first].len -= (unsigned)skip;
    memmove(bufs, bufs + first, (*nbufs - first) * sizeof(*bufs));
    *nbufs -= first;
    return 0;
}
