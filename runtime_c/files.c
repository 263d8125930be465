/* Files of the standalone binaries (see files.h). */
#define _POSIX_C_SOURCE 200809L
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

int fc_file_fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
#define fail fc_file_fail

/* ---------------------------------------------------------------- temporaries still on disk */

#define PENDING 64
static char *volatile pending[PENDING]; /* read by the signal handler: set only to whole names */

static void remember(char *name) {
    int i;
    for (i = 0; i < PENDING; ++i)
        if (!pending[i]) {
            pending[i] = name;
            return;
        }
}

static void forget(const char *name) {
    int i;
    for (i = 0; i < PENDING; ++i)
        if (pending[i] == name) pending[i] = NULL;
}

static void on_signal(int sig) {
    int i;
    for (i = 0; i < PENDING; ++i)
        if (pending[i]) unlink(pending[i]); /* async-signal-safe, as are signal and raise */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The signals whose handler removes temporaries are held while a set of outputs is put in place,
 * rolled back or finished: a run stopped then ends with the set whole (old or new, never a mix) and
 * its kept previous files, named in pending once the set is in place, removed. */
static sigset_t held_before;

static void hold_signals(void) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGHUP);
    sigprocmask(SIG_BLOCK, &s, &held_before);
}

static void release_signals(void) { sigprocmask(SIG_SETMASK, &held_before, NULL); }

void fc_file_cleanup_on_signals(void) {
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa, old;
    int i;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < 3; ++i)
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
}

/* ---------------------------------------------------------------- reading */

int fc_file_open_read(const char *path, size_t *size, char *err, size_t errlen) {
    struct stat st;
    int fd, flags, saved;
    *size = 0;
    /* non-blocking: opening a FIFO for reading would wait for a writer */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return fail(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        saved = errno;
        close(fd);
        return fail(err, errlen, "%s: cannot read (%s)", path, strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errlen, "%s: not a regular file (%s)", path,
                    S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
    }
    if ((uintmax_t)st.st_size > (uintmax_t)(SIZE_MAX / 2)) {
        close(fd);
        return fail(err, errlen, "%s: too large (%lld bytes)", path, (long long)st.st_size);
    }
    flags = fcntl(fd, F_GETFL);
    if (flags == -1 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
        saved = errno;
        close(fd);
        return fail(err, errlen, "%s: cannot read (%s)", path, strerror(saved));
    }
    *size = (size_t)st.st_size;
    return fd;
}

FILE *fc_file_fopen_read(const char *path, size_t *size, char *err, size_t errlen) {
    int fd = fc_file_open_read(path, size, err, errlen), saved;
    FILE *fp;
    if (fd < 0) return NULL;
    fp = fdopen(fd, "rb");
    if (!fp) {
        saved = errno;
        close(fd);
        fail(err, errlen, "%s: cannot read (%s)", path, strerror(saved));
    }
    return fp;
}

/* ---------------------------------------------------------------- writing */

/* A new file beside path named .<file>.<tag>XXXXXX, created with mkstemp (never an existing path
 * or link) and given the permissions open would (0666 less the umask). Returns its descriptor and
 * name (malloc'ed), or -1. */
static int new_beside(const char *path, const char *tag, char **name, char *err, size_t errlen) {
    const char *slash = strrchr(path, '/'), *file = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t total = dlen + strlen(file) + strlen(tag) + sizeof "..XXXXXX";
    mode_t mask;
    int fd, saved;
    *name = NULL;
    if (!*file) return fail(err, errlen, "%s: not a file name", path);
    *name = (char *)malloc(total);
    if (!*name) return fail(err, errlen, "%s: out of memory", path);
    memcpy(*name, path, dlen);
    snprintf(*name + dlen, total - dlen, ".%s.%sXXXXXX", file, tag);
    fd = mkstemp(*name);
    if (fd < 0) {
        saved = errno;
        free(*name);
        *name = NULL;
        return fail(err, errlen, "%s: cannot write (%s)", path, strerror(saved));
    }
    mask = umask(0);
    umask(mask);
    if (fchmod(fd, (mode_t)(0666 & ~mask)) != 0) {
        saved = errno;
        close(fd);
        unlink(*name);
        free(*name);
        *name = NULL;
        return fail(err, errlen, "%s: cannot write (%s)", path, strerror(saved));
    }
    return fd;
}

/* "<host>.<pid>.": who makes a temporary, in its name, so that fc_file_sweep can tell one a killed
 * process left (its host is this one, its process is gone) from one another process is writing.
 * The host name keeps letters, digits and '-' (at most 40 of them). */
static void owner_tag(char *tag, size_t len) {
    char host[256];
    size_t i, n = 0;
    if (gethostname(host, sizeof host) != 0) host[0] = 0;
    host[sizeof host - 1] = 0;
    for (i = 0; host[i] && n < 40; ++i) {
        char c = host[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') host[n++] = c;
    }
    host[n] = 0;
    snprintf(tag, len, "%s.%ld.", n ? host : "host", (long)getpid());
}

int fc_file_temp(const char *path, char **tmp, FILE **fp, char *err, size_t errlen) {
    char tag[64];
    int fd, saved;
    owner_tag(tag, sizeof tag);
    hold_signals(); /* a run stopped between the file's creation and pending naming it leaves none */
    fd = new_beside(path, tag, tmp, err, errlen);
    *fp = NULL;
    if (fd >= 0) remember(*tmp);
    release_signals();
    if (fd < 0) return -1;
    *fp = fdopen(fd, "wb");
    if (!*fp) {
        saved = errno;
        close(fd);
        fc_file_drop(*tmp, NULL);
        *tmp = NULL;
        return fail(err, errlen, "%s: cannot write (%s)", path, strerror(saved));
    }
    return 0;
}

void fc_file_drop(char *tmp, FILE *fp) {
    if (fp) fclose(fp);
    if (tmp) {
        unlink(tmp);
        forget(tmp);
        free(tmp);
    }
}

int fc_file_close(FILE *fp, int sync, const char *path, char *err, size_t errlen) {
    int saved;
    errno = 0;
    if (ferror(fp) || fflush(fp) != 0 || (sync && fsync(fileno(fp)) != 0)) {
        saved = errno;
        fclose(fp);
        return fail(err, errlen, "%s: write failed (%s)", path, saved ? strerror(saved) : "stream error");
    }
    if (fclose(fp) != 0) return fail(err, errlen, "%s: write failed (%s)", path, strerror(errno));
    return 0;
}

int fc_file_put(char *tmp, const char *path, char *err, size_t errlen) {
    int saved;
    if (rename(tmp, path) != 0) {
        saved = errno;
        fc_file_drop(tmp, NULL);
        return fail(err, errlen, "%s: cannot write (%s)", path, strerror(saved));
    }
    forget(tmp);
    free(tmp);
    return 0;
}

/* Keep the file at s->path aside: a hard link beside it (the path keeps its file), or where the file
 * system has none, the file renamed aside (s->had: 1 linked, 2 moved). 0, or -1 with err. */
static int keep_aside(fc_file_set *s, char *err, size_t errlen) {
    int tries, fd, saved;
    for (tries = 0; tries < 8; ++tries) {
        fd = new_beside(s->path, "old-", &s->kept, err, errlen);
        if (fd < 0) return -1;
        close(fd);
        unlink(s->kept); /* its name, now free, for the link */
        if (linkat(AT_FDCWD, s->path, AT_FDCWD, s->kept, 0) == 0) {
            s->had = 1;
            return 0;
        }
        saved = errno;
        if (saved != EEXIST) break;
        free(s->kept); /* another process took the name: another one */
        s->kept = NULL;
    }
    if (!s->kept) return fail(err, errlen, "%s: cannot keep the previous file aside", s->path);
    fd = open(s->kept, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600); /* no hard links: move it */
    if (fd >= 0) close(fd);
    if (fd < 0 || rename(s->path, s->kept) != 0) {
        saved = errno;
        if (fd >= 0) unlink(s->kept);
        free(s->kept);
        s->kept = NULL;
        return fail(err, errlen, "%s: cannot keep the previous file aside (%s)", s->path, strerror(saved));
    }
    s->had = 2;
    return 0;
}

/* Put back what s->path held before the set (its previous file, or nothing). */
static void restore(fc_file_set *s) {
    if (s->done && s->had) {
        rename(s->kept, s->path); /* the previous file replaces the new one in one step */
    } else if (s->done) {
        unlink(s->path); /* the new file; nothing was there */
    } else if (s->had == 2) {
        rename(s->kept, s->path); /* moved aside, never replaced */
    } else if (s->had == 1) {
        unlink(s->kept); /* a second name of the file still at path */
    }
    if (s->kept) {
        forget(s->kept);
        free(s->kept);
    }
    s->kept = NULL;
    s->had = 0;
    s->done = 0;
}

int fc_files_commit(fc_file_set *set, int n, char *err, size_t errlen) {
    struct stat st;
    int i, j;
    hold_signals();
    for (i = 0; i < n; ++i) {
        set[i].kept = NULL;
        set[i].had = set[i].done = 0;
        if (set[i].tmp && lstat(set[i].path, &st) == 0 && S_ISDIR(st.st_mode)) {
            fail(err, errlen, "%s: cannot write (a folder of that name is in the way)", set[i].path);
            for (j = 0; j < n; ++j)
                if (set[j].tmp) {
                    fc_file_drop(set[j].tmp, NULL);
                    set[j].tmp = NULL;
                }
            release_signals();
            return -1;
        }
    }
    for (i = 0; i < n; ++i) {
        if (!set[i].tmp) continue;
        if (lstat(set[i].path, &st) == 0 && keep_aside(&set[i], err, errlen) != 0) break;
        if (rename(set[i].tmp, set[i].path) != 0) {
            fail(err, errlen, "%s: cannot write (%s)", set[i].path, strerror(errno));
            break;
        }
        forget(set[i].tmp);
        free(set[i].tmp);
        set[i].tmp = NULL;
        set[i].done = 1;
    }
    if (i == n) {
        for (j = 0; j < n; ++j)
            if (set[j].kept) remember(set[j].kept); /* the set stands: a stopped run drops them */
        release_signals();
        return 0;
    }
    for (j = i; j >= 0; --j) restore(&set[j]);
    for (j = 0; j < n; ++j)
        if (set[j].tmp) {
            fc_file_drop(set[j].tmp, NULL);
            set[j].tmp = NULL;
        }
    release_signals();
    return -1;
}

void fc_files_rollback(fc_file_set *set, int n) {
    int j;
    hold_signals();
    for (j = n - 1; j >= 0; --j) restore(&set[j]);
    release_signals();
}

void fc_files_finish(fc_file_set *set, int n) {
    int j;
    hold_signals();
    for (j = 0; j < n; ++j) {
        if (set[j].kept) {
            if (set[j].had == 1 || set[j].done) unlink(set[j].kept);
            forget(set[j].kept);
            free(set[j].kept);
            set[j].kept = NULL;
        }
        if (set[j].tmp) fc_file_drop(set[j].tmp, NULL);
        set[j].tmp = NULL;
        set[j].had = set[j].done = 0;
    }
    release_signals();
}

/* ---------------------------------------------------------------- checks */

int fc_file_same(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int fc_file_check_writable(const char *path, char *err, size_t errlen) {
    struct stat st;
    char *tmp;
    FILE *fp;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return fail(err, errlen, "%s: cannot write there: it is %s", path,
                    S_ISDIR(st.st_mode) ? "a folder" : "not a regular file");
    if (fc_file_temp(path, &tmp, &fp, err, errlen) != 0) return -1;
    fc_file_drop(tmp, fp);
    return 0;
}

int fc_file_sweep(const char *path) {
    const char *slash = strrchr(path, '/'), *file = slash ? slash + 1 : path;
    char dir[4096], tag[64], prefix[512], full[4608];
    size_t plen;
    DIR *d;
    struct dirent *e;
    int removed = 0;
    if (!*file) return 0;
    if (slash) {
        size_t dlen = (size_t)(slash - path);
        if (dlen >= sizeof dir) return 0;
        memcpy(dir, path, dlen ? dlen : 1); /* "/x": the root */
        dir[dlen ? dlen : 1] = 0;
    } else {
        strcpy(dir, ".");
    }
    owner_tag(tag, sizeof tag);
    *strchr(tag, '.') = 0; /* the host alone */
    if ((size_t)snprintf(prefix, sizeof prefix, ".%s.%s.", file, tag) >= sizeof prefix) return 0;
    plen = strlen(prefix);
    if (!(d = opendir(dir))) return 0;
    while ((e = readdir(d)) != NULL) {
        const char *rest = e->d_name + plen;
        char *end;
        long pid;
        struct stat st;
        if (strncmp(e->d_name, prefix, plen) != 0) continue;
        errno = 0;
        pid = strtol(rest, &end, 10);
        /* .<file>.<host>.<pid>.XXXXXX: mkstemp's six characters after the pid's dot */
        if (end == rest || *end != '.' || strlen(end + 1) != 6 || pid <= 0 || errno) continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive */
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && unlink(full) == 0) ++removed;
    }
    closedir(d);
    return removed;
}
