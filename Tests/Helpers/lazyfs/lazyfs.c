/*
 * lazyfs: a FUSE filesystem that forgets what was not fsynced, for georelay's power-cut test.
 *
 * Usage: lazyfs BACKING MOUNTPOINT
 *
 * It passes through to BACKING but keeps in its own memory everything a power cut would
 * take with it: every write and truncate not yet made durable, and every change to a
 * directory's names (create, rename, unlink) not yet made durable. The "power cut" is
 * SIGKILL of this process: its memory goes, and BACKING holds exactly what was made durable
 * (plus orphans under BACKING/.lazyfs, which the next mount deletes, as fsck would).
 * A clean unmount (fusermount3 -u, SIGTERM) is a clean shutdown: everything is written first.
 *
 * What makes things durable, as POSIX promises and no more:
 *   - fsync or fdatasync on a file: its data and size (nothing about its names);
 *   - fsync on a directory: that directory's names as they are now (each entry pointing at
 *     its file as durable as that file's own fsyncs made it: a file renamed into place
 *     without its own fsync is there, empty or stale).
 * A file created and fsynced, but whose directory was not, is gone after the cut; a rename
 * without the directory's fsync is undone.
 *
 * What it does not model:
 *   - writes that reach the disk without an fsync (a real kernel may flush any of them at any
 *     time; here none does), and torn sectors inside one write. A cut that lands inside an
 *     fsync leaves that file with some of its blocks written (in block order) and a
 *     directory with some of its names updated, which the caller, not yet answered, cannot
 *     have relied on;
 *   - metadata other than size and names: mode, owner and times go to BACKING at once;
 *   - directories themselves: mkdir and rmdir are durable at once (rmdir makes the
 *     removals inside durable first); a directory cannot be renamed (EPERM), nor can files be
 *     hard-linked, nor special files made (EPERM): georelay's spool directory needs none;
 *   - ext4's extras beyond POSIX (a new file's fsync committing its directory entry,
 *     auto_da_alloc on rename): not given, so a program that relies on them fails here.
 *
 * The kernel's page cache stays in front (no direct_io, so SQLite's shared memory map of
 * its -shm file works), but in write-through mode: every write reaches this process at
 * once, and a cut, followed by an unmount, leaves no cache behind.
 *
 * Single-threaded: one request at a time, no locks.
 */
#define FUSE_USE_VERSION 34
#define _GNU_SOURCE
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

enum { BLOCK = 4096 };
#define STORE ".lazyfs"
#define TMPNAME ".lazyfs-tmp"

struct entry {
    char *name;
    uint64_t ino;
    struct entry *next;
};

struct node {
    int is_dir;
    int dead;
    int fd;                 /* backing file (O_RDWR) or directory (O_RDONLY) */
    /* files */
    char store[32];         /* its name under BACKING/.lazyfs, which keeps it linked */
    off_t size;             /* current size */
    off_t valid;            /* how much of the backing file is still current */
    char **blocks;          /* dirty blocks by index; NULL where the backing file is current */
    size_t nblocks;         /* capacity of blocks */
    struct timespec mtime;
    int links;              /* current names */
    int durable_links;      /* names in durable directory listings */
    int open;               /* open handles */
    /* directories */
    uint64_t parent;
    struct entry *current;  /* names now */
    struct entry *durable;  /* names as the backing directory has them */
};

static struct node **nodes;
static uint64_t nnodes, capnodes;
static int storefd = -1;
static unsigned long long store_counter;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lazyfs: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ": %s\n", strerror(errno));
    va_end(ap);
    exit(1);
}

static uint64_t new_node(int is_dir) {
    if (nnodes + 1 >= capnodes) {
        capnodes = capnodes ? capnodes * 2 : 1024;
        nodes = realloc(nodes, capnodes * sizeof *nodes);
        if (!nodes) die("out of memory");
    }
    uint64_t ino = ++nnodes; /* the root is 1; numbers are never reused */
    struct node *n = calloc(1, sizeof *n);
    if (!n) die("out of memory");
    n->is_dir = is_dir;
    n->fd = -1;
    nodes[ino] = n;
    return ino;
}

static struct node *get(uint64_t ino) {
    if (ino == 0 || ino > nnodes || !nodes[ino] || nodes[ino]->dead) return NULL;
    return nodes[ino];
}

/* ---- directory listings ---- */

static struct entry *find(struct entry *list, const char *name) {
    for (; list; list = list->next)
        if (strcmp(list->name, name) == 0) return list;
    return NULL;
}

static void add(struct entry **list, const char *name, uint64_t ino) {
    struct entry *e = malloc(sizeof *e);
    if (!e || !(e->name = strdup(name))) die("out of memory");
    e->ino = ino;
    e->next = *list;
    *list = e;
}

static void drop(struct entry **list, const char *name) {
    for (struct entry **p = list; *p; p = &(*p)->next) {
        if (strcmp((*p)->name, name) == 0) {
            struct entry *e = *p;
            *p = e->next;
            free(e->name);
            free(e);
            return;
        }
    }
}

/* ---- file contents: the backing file up to `valid`, dirty blocks over it, zeros after ---- */

static void free_blocks(struct node *n) {
    for (size_t b = 0; b < n->nblocks; b++) free(n->blocks[b]);
    free(n->blocks);
    n->blocks = NULL;
    n->nblocks = 0;
}

/* A file nothing can reach any more (no name now or on disk, not open) is forgotten. */
static void collect(struct node *n) {
    if (n->is_dir || n->dead || n->links > 0 || n->open > 0) return;
    free_blocks(n); /* its current contents are unreachable; what is durable stays */
    if (n->durable_links > 0) return;
    close(n->fd);
    unlinkat(storefd, n->store, 0);
    n->dead = 1;
}

static int pread_full(int fd, char *buf, size_t len, off_t off) {
    while (len > 0) {
        ssize_t r = pread(fd, buf, len, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) { memset(buf, 0, len); return 0; }
        buf += r; len -= (size_t)r; off += r;
    }
    return 0;
}

static int pwrite_full(int fd, const char *buf, size_t len, off_t off) {
    while (len > 0) {
        ssize_t r = pwrite(fd, buf, len, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        buf += r; len -= (size_t)r; off += r;
    }
    return 0;
}

/* Reads block b as it is now into buf (BLOCK bytes). */
static int read_block(struct node *n, size_t b, char *buf) {
    if (b < n->nblocks && n->blocks[b]) { memcpy(buf, n->blocks[b], BLOCK); return 0; }
    memset(buf, 0, BLOCK);
    off_t start = (off_t)b * BLOCK;
    if (start >= n->valid) return 0;
    size_t len = (size_t)(n->valid - start) < BLOCK ? (size_t)(n->valid - start) : BLOCK;
    return pread_full(n->fd, buf, len, start);
}

static char *dirty_block(struct node *n, size_t b, int *err) {
    if (b >= n->nblocks) {
        size_t cap = n->nblocks ? n->nblocks : 16;
        while (cap <= b) cap *= 2;
        char **grown = realloc(n->blocks, cap * sizeof *grown);
        if (!grown) { *err = -ENOMEM; return NULL; }
        memset(grown + n->nblocks, 0, (cap - n->nblocks) * sizeof *grown);
        n->blocks = grown;
        n->nblocks = cap;
    }
    if (n->blocks[b]) return n->blocks[b];
    char *blk = malloc(BLOCK);
    if (!blk) { *err = -ENOMEM; return NULL; }
    int r = read_block(n, b, blk);
    if (r < 0) { free(blk); *err = r; return NULL; }
    n->blocks[b] = blk;
    return blk;
}

static void truncate_node(struct node *n, off_t size) {
    if (size < n->size) {
        size_t first_gone = (size_t)((size + BLOCK - 1) / BLOCK);
        for (size_t b = first_gone; b < n->nblocks; b++) { free(n->blocks[b]); n->blocks[b] = NULL; }
        size_t partial = (size_t)(size / BLOCK);
        if (size % BLOCK && partial < n->nblocks && n->blocks[partial])
            memset(n->blocks[partial] + size % BLOCK, 0, BLOCK - (size_t)(size % BLOCK));
        if (n->valid > size) n->valid = size;
    }
    n->size = size;
    clock_gettime(CLOCK_REALTIME, &n->mtime);
}

/* fsync: the backing file becomes what the file is now. */
static int flush_file(struct node *n) {
    struct stat st;
    if (fstat(n->fd, &st) < 0) return -errno;
    if (st.st_size > n->valid && ftruncate(n->fd, n->valid) < 0) return -errno;
    for (size_t b = 0; b < n->nblocks; b++) {
        if (!n->blocks[b]) continue;
        off_t start = (off_t)b * BLOCK;
        if (start < n->size) {
            size_t len = (size_t)(n->size - start) < BLOCK ? (size_t)(n->size - start) : BLOCK;
            int r = pwrite_full(n->fd, n->blocks[b], len, start);
            if (r < 0) return r;
        }
        free(n->blocks[b]);
        n->blocks[b] = NULL;
    }
    if (ftruncate(n->fd, n->size) < 0) return -errno;
    n->valid = n->size;
    return 0;
}

/* fsync on a directory: the backing directory's names become what they are now. */
static int sync_dir(struct node *d) {
    for (struct entry *e = d->durable, *next; e; e = next) {
        next = e->next;
        struct entry *c = find(d->current, e->name);
        if (c && c->ino == e->ino) continue;
        struct node *n = nodes[e->ino];
        if (n->is_dir) continue; /* directories are durable at once */
        /* A name that now points at another file is replaced atomically below. */
        if (!c && unlinkat(d->fd, e->name, 0) < 0 && errno != ENOENT) return -errno;
        n->durable_links--;
        drop(&d->durable, e->name);
        collect(n);
    }
    for (struct entry *c = d->current; c; c = c->next) {
        if (find(d->durable, c->name)) continue;
        struct node *n = nodes[c->ino];
        if (n->is_dir) continue;
        unlinkat(d->fd, TMPNAME, 0);
        if (linkat(storefd, n->store, d->fd, TMPNAME, 0) < 0) return -errno;
        if (renameat(d->fd, TMPNAME, d->fd, c->name) < 0) return -errno;
        add(&d->durable, c->name, c->ino);
        n->durable_links++;
    }
    return 0;
}

/* ---- loading BACKING ---- */

static void link_into_store(struct node *n, int dirfd, const char *name) {
    snprintf(n->store, sizeof n->store, "%llu", ++store_counter);
    if (linkat(dirfd, name, storefd, n->store, 0) < 0) die("link %s into the store", name);
}

static void scan(uint64_t dino) {
    struct node *d = nodes[dino];
    int fd = dup(d->fd);
    DIR *dir = fdopendir(fd);
    if (!dir) die("opendir");
    struct { dev_t dev; ino_t ino; uint64_t node; } *seen = NULL;
    size_t nseen = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        if (!strcmp(name, TMPNAME)) { unlinkat(d->fd, name, 0); continue; }
        if (dino == 1 && !strcmp(name, STORE)) continue;
        struct stat st;
        if (fstatat(d->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) die("stat %s", name);
        if (S_ISDIR(st.st_mode)) {
            uint64_t ino = new_node(1);
            struct node *n = nodes[ino];
            n->fd = openat(d->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (n->fd < 0) die("open directory %s", name);
            n->parent = dino;
            add(&d->current, name, ino);
            add(&d->durable, name, ino);
            scan(ino);
        } else if (S_ISREG(st.st_mode)) {
            uint64_t ino = 0;
            for (size_t i = 0; i < nseen; i++)
                if (seen[i].dev == st.st_dev && seen[i].ino == st.st_ino) ino = seen[i].node;
            if (!ino) {
                ino = new_node(0);
                struct node *n = nodes[ino];
                n->fd = openat(d->fd, name, O_RDWR | O_CLOEXEC);
                if (n->fd < 0) die("open %s", name);
                n->size = n->valid = st.st_size;
                n->mtime = st.st_mtim;
                link_into_store(n, d->fd, name);
                seen = realloc(seen, (nseen + 1) * sizeof *seen);
                seen[nseen].dev = st.st_dev; seen[nseen].ino = st.st_ino; seen[nseen].node = ino;
                nseen++;
            }
            nodes[ino]->links++;
            nodes[ino]->durable_links++;
            add(&d->current, name, ino);
            add(&d->durable, name, ino);
        }
        /* Anything else (sockets, symlinks) is not shown. */
    }
    free(seen);
    closedir(dir);
}

/* Orphans of the last cut: files that were in the store but never durably named. */
static void clear_store(int rootfd) {
    if (mkdirat(rootfd, STORE, 0700) < 0 && errno != EEXIST) die("mkdir %s", STORE);
    storefd = openat(rootfd, STORE, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (storefd < 0) die("open %s", STORE);
    DIR *dir = fdopendir(dup(storefd));
    if (!dir) die("opendir %s", STORE);
    struct dirent *de;
    while ((de = readdir(dir)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlinkat(storefd, de->d_name, 0);
    closedir(dir);
}

/* ---- FUSE operations ---- */

static int fill_attr(uint64_t ino, struct stat *st) {
    struct node *n = get(ino);
    if (!n) return -ENOENT;
    if (fstat(n->fd, st) < 0) return -errno;
    st->st_ino = ino;
    if (n->is_dir) {
        st->st_nlink = 2;
    } else {
        st->st_size = n->size;
        st->st_blocks = (n->size + 511) / 512;
        st->st_nlink = n->links;
        st->st_mtim = n->mtime;
    }
    return 0;
}

static void reply_entry(fuse_req_t req, uint64_t ino) {
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = ino;
    e.generation = 1;
    e.attr_timeout = 1.0;
    e.entry_timeout = 1.0;
    int r = fill_attr(ino, &e.attr);
    if (r < 0) fuse_reply_err(req, -r);
    else fuse_reply_entry(req, &e);
}

static int bad_name(const char *name) { return strncmp(name, STORE, strlen(STORE)) == 0; }

static void op_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    /* Write-through: every write comes here at once, so nothing sits in the kernel. */
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

static void op_destroy(void *userdata) {
    (void)userdata;
    /* A clean unmount is a clean shutdown: everything becomes durable, as `sync; umount`. */
    for (uint64_t i = 1; i <= nnodes; i++) {
        struct node *n = get(i);
        if (n && !n->is_dir && n->links + n->open > 0) flush_file(n);
    }
    for (uint64_t i = 1; i <= nnodes; i++) {
        struct node *n = get(i);
        if (n && n->is_dir) sync_dir(n);
    }
    /* Every file still reachable is named now: the store's links are no longer needed. */
    for (uint64_t i = 1; i <= nnodes; i++) {
        struct node *n = get(i);
        if (n && !n->is_dir) unlinkat(storefd, n->store, 0);
    }
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct node *d = get(parent);
    if (!d || !d->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    struct entry *e = find(d->current, name);
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    reply_entry(req, e->ino);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    (void)ino; (void)nlookup;
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    int r = fill_attr(ino, &st);
    if (r < 0) fuse_reply_err(req, -r);
    else fuse_reply_attr(req, &st, 1.0);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
    (void)fi;
    struct node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if ((to_set & FUSE_SET_ATTR_MODE) && fchmod(n->fd, attr->st_mode & 07777) < 0) { fuse_reply_err(req, errno); return; }
    if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
        gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
        if (fchown(n->fd, uid, gid) < 0) { fuse_reply_err(req, errno); return; }
    }
    if (to_set & FUSE_SET_ATTR_SIZE) {
        if (n->is_dir) { fuse_reply_err(req, EISDIR); return; }
        truncate_node(n, attr->st_size);
    }
    if (!n->is_dir) {
        if (to_set & FUSE_SET_ATTR_MTIME_NOW) clock_gettime(CLOCK_REALTIME, &n->mtime);
        else if (to_set & FUSE_SET_ATTR_MTIME) n->mtime = attr->st_mtim;
    }
    op_getattr(req, ino, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    struct node *d = get(parent);
    if (!d || !d->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    if (bad_name(name)) { fuse_reply_err(req, EPERM); return; }
    if (find(d->current, name)) { fuse_reply_err(req, EEXIST); return; }
    /* A name durable but unlinked now would block the real mkdir: settle the listing first. */
    if (find(d->durable, name)) sync_dir(d);
    if (mkdirat(d->fd, name, mode & 07777) < 0) { fuse_reply_err(req, errno); return; }
    uint64_t ino = new_node(1);
    struct node *n = nodes[ino];
    n->fd = openat(d->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    n->parent = parent;
    add(&d->current, name, ino);
    add(&d->durable, name, ino);
    reply_entry(req, ino);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct node *d = get(parent);
    struct entry *e = d ? find(d->current, name) : NULL;
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    struct node *n = nodes[e->ino];
    if (!n->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    if (n->current) { fuse_reply_err(req, ENOTEMPTY); return; }
    int r = sync_dir(n);
    if (r < 0) { fuse_reply_err(req, -r); return; }
    unlinkat(n->fd, TMPNAME, 0);
    if (unlinkat(d->fd, name, AT_REMOVEDIR) < 0) { fuse_reply_err(req, errno); return; }
    close(n->fd);
    n->dead = 1;
    drop(&d->current, name);
    drop(&d->durable, name);
    fuse_reply_err(req, 0);
}

/* A new file: in the store only, so that nothing durable names it yet. */
static uint64_t make_file(struct node *d, const char *name, mode_t mode, int *err) {
    uint64_t ino = new_node(0);
    struct node *n = nodes[ino];
    snprintf(n->store, sizeof n->store, "%llu", ++store_counter);
    n->fd = openat(storefd, n->store, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
    if (n->fd < 0) { *err = errno; n->dead = 1; return 0; }
    fchmod(n->fd, mode & 07777);
    clock_gettime(CLOCK_REALTIME, &n->mtime);
    n->links = 1;
    add(&d->current, name, ino);
    return ino;
}

static void open_node(struct node *n, struct fuse_file_info *fi) {
    n->open++;
    if (fi->flags & O_TRUNC) truncate_node(n, 0);
    fi->direct_io = 0;
    fi->keep_cache = 0;
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    struct node *d = get(parent);
    if (!d || !d->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    if (bad_name(name)) { fuse_reply_err(req, EPERM); return; }
    struct entry *e = find(d->current, name);
    uint64_t ino;
    if (e) {
        if (fi->flags & O_EXCL) { fuse_reply_err(req, EEXIST); return; }
        if (nodes[e->ino]->is_dir) { fuse_reply_err(req, EISDIR); return; }
        ino = e->ino;
    } else {
        int err = 0;
        ino = make_file(d, name, mode, &err);
        if (!ino) { fuse_reply_err(req, err); return; }
    }
    open_node(nodes[ino], fi);
    struct fuse_entry_param ep;
    memset(&ep, 0, sizeof ep);
    ep.ino = ino;
    ep.generation = 1;
    ep.attr_timeout = 1.0;
    ep.entry_timeout = 1.0;
    fill_attr(ino, &ep.attr);
    if (fuse_reply_create(req, &ep, fi) != 0) nodes[ino]->open--;
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
    (void)rdev;
    struct node *d = get(parent);
    if (!d || !d->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    if (!S_ISREG(mode) || bad_name(name)) { fuse_reply_err(req, EPERM); return; }
    if (find(d->current, name)) { fuse_reply_err(req, EEXIST); return; }
    int err = 0;
    uint64_t ino = make_file(d, name, mode, &err);
    if (!ino) { fuse_reply_err(req, err); return; }
    reply_entry(req, ino);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct node *d = get(parent);
    struct entry *e = d ? find(d->current, name) : NULL;
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    struct node *n = nodes[e->ino];
    if (n->is_dir) { fuse_reply_err(req, EISDIR); return; }
    drop(&d->current, name);
    n->links--;
    collect(n);
    fuse_reply_err(req, 0);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
                      unsigned int flags) {
    struct node *d = get(parent), *nd = get(newparent);
    if (!d || !nd || !d->is_dir || !nd->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    if (flags & ~RENAME_NOREPLACE) { fuse_reply_err(req, EINVAL); return; }
    if (bad_name(newname)) { fuse_reply_err(req, EPERM); return; }
    struct entry *e = find(d->current, name);
    if (!e) { fuse_reply_err(req, ENOENT); return; }
    uint64_t ino = e->ino;
    if (nodes[ino]->is_dir) { fuse_reply_err(req, EPERM); return; }
    struct entry *t = find(nd->current, newname);
    if (t && t->ino == ino) { fuse_reply_err(req, 0); return; }
    if (t) {
        if (flags & RENAME_NOREPLACE) { fuse_reply_err(req, EEXIST); return; }
        struct node *old = nodes[t->ino];
        if (old->is_dir) { fuse_reply_err(req, EISDIR); return; }
        drop(&nd->current, newname);
        old->links--;
        collect(old);
    }
    drop(&d->current, name);
    add(&nd->current, newname, ino);
    fuse_reply_err(req, 0);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
    (void)ino; (void)newparent; (void)newname;
    fuse_reply_err(req, EPERM);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
    (void)link; (void)parent; (void)name;
    fuse_reply_err(req, EPERM);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if (n->is_dir) { fuse_reply_err(req, EISDIR); return; }
    open_node(n, fi);
    if (fuse_reply_open(req, fi) != 0) n->open--;
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct node *n = get(ino);
    if (n) {
        n->open--;
        collect(n);
    }
    fuse_reply_err(req, 0);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino; (void)fi;
    fuse_reply_err(req, 0); /* close() promises nothing about durability */
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi;
    struct node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    if (off >= n->size) { fuse_reply_buf(req, NULL, 0); return; }
    if ((off_t)size > n->size - off) size = (size_t)(n->size - off);
    char *buf = malloc(size ? size : 1);
    char block[BLOCK];
    if (!buf) { fuse_reply_err(req, ENOMEM); return; }
    size_t done = 0;
    while (done < size) {
        off_t pos = off + (off_t)done;
        size_t b = (size_t)(pos / BLOCK), in = (size_t)(pos % BLOCK);
        size_t len = BLOCK - in < size - done ? BLOCK - in : size - done;
        int r = read_block(n, b, block);
        if (r < 0) { free(buf); fuse_reply_err(req, -r); return; }
        memcpy(buf + done, block + in, len);
        done += len;
    }
    fuse_reply_buf(req, buf, size);
    free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi;
    struct node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    size_t done = 0;
    while (done < size) {
        off_t pos = off + (off_t)done;
        size_t b = (size_t)(pos / BLOCK), in = (size_t)(pos % BLOCK);
        size_t len = BLOCK - in < size - done ? BLOCK - in : size - done;
        int err = 0;
        char *blk = dirty_block(n, b, &err);
        if (!blk) { fuse_reply_err(req, -err); return; }
        memcpy(blk + in, buf + done, len);
        done += len;
    }
    if (off + (off_t)size > n->size) n->size = off + (off_t)size;
    clock_gettime(CLOCK_REALTIME, &n->mtime);
    fuse_reply_write(req, size);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)datasync; (void)fi;
    struct node *n = get(ino);
    if (!n) { fuse_reply_err(req, ENOENT); return; }
    int r = flush_file(n);
    fuse_reply_err(req, r < 0 ? -r : 0);
}

struct listing {
    size_t count;
    struct { char *name; uint64_t ino; int is_dir; } *items;
};

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct node *d = get(ino);
    if (!d || !d->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    struct listing *l = calloc(1, sizeof *l);
    size_t count = 2;
    for (struct entry *e = d->current; e; e = e->next) count++;
    l->items = calloc(count, sizeof *l->items);
    l->items[0].name = strdup("."); l->items[0].ino = ino; l->items[0].is_dir = 1;
    l->items[1].name = strdup(".."); l->items[1].ino = d->parent ? d->parent : ino; l->items[1].is_dir = 1;
    l->count = 2;
    for (struct entry *e = d->current; e; e = e->next, l->count++) {
        l->items[l->count].name = strdup(e->name);
        l->items[l->count].ino = e->ino;
        l->items[l->count].is_dir = nodes[e->ino]->is_dir;
    }
    fi->fh = (uint64_t)(uintptr_t)l;
    fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino;
    struct listing *l = (struct listing *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    size_t used = 0;
    for (size_t i = (size_t)off; i < l->count; i++) {
        struct stat st;
        memset(&st, 0, sizeof st);
        st.st_ino = l->items[i].ino;
        st.st_mode = l->items[i].is_dir ? S_IFDIR : S_IFREG;
        size_t need = fuse_add_direntry(req, buf + used, size - used, l->items[i].name, &st, (off_t)(i + 1));
        if (need > size - used) break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    struct listing *l = (struct listing *)(uintptr_t)fi->fh;
    for (size_t i = 0; i < l->count; i++) free(l->items[i].name);
    free(l->items);
    free(l);
    fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)datasync; (void)fi;
    struct node *d = get(ino);
    if (!d || !d->is_dir) { fuse_reply_err(req, ENOTDIR); return; }
    int r = sync_dir(d);
    fuse_reply_err(req, r < 0 ? -r : 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino;
    struct statvfs st;
    if (fstatvfs(nodes[1]->fd, &st) < 0) { fuse_reply_err(req, errno); return; }
    fuse_reply_statfs(req, &st);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .destroy = op_destroy,
    .lookup = op_lookup,
    .forget = op_forget,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .create = op_create,
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: lazyfs BACKING MOUNTPOINT\n");
        return 2;
    }
    uint64_t root = new_node(1);
    nodes[root]->fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (nodes[root]->fd < 0) die("open %s", argv[1]);
    clear_store(nodes[root]->fd);
    scan(root);

    char *fuse_argv[] = { argv[0], "-o", "fsname=lazyfs,subtype=lazyfs", NULL };
    struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se) { fprintf(stderr, "lazyfs: fuse_session_new failed\n"); return 1; }
    if (fuse_set_signal_handlers(se) != 0) { fprintf(stderr, "lazyfs: cannot set signal handlers\n"); return 1; }
    if (fuse_session_mount(se, argv[2]) != 0) { fprintf(stderr, "lazyfs: cannot mount on %s\n", argv[2]); return 1; }
    fprintf(stderr, "lazyfs: %s on %s, %llu files durable\n", argv[1], argv[2], store_counter);
    int r = fuse_session_loop(se);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return r < 0 ? 1 : 0;
}
