#ifndef GEORELAY_CCURL_SHIM_H
#define GEORELAY_CCURL_SHIM_H
#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call:
// one typed wrapper per argument kind.
static inline CURLcode georelay_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode georelay_curl_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode georelay_curl_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode georelay_curl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode georelay_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode georelay_curl_setopt_write_function(CURL *h, size_t (*f)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, f); }
static inline CURLcode georelay_curl_setopt_header_function(CURL *h, size_t (*f)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, f); }
static inline CURLcode georelay_curl_setopt_xferinfo_function(CURL *h, int (*f)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t)) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, f); }
static inline CURLcode georelay_curl_setopt_opensocket_function(CURL *h, curl_socket_t (*f)(void *, curlsocktype, struct curl_sockaddr *)) { return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, f); }
static inline CURLcode georelay_curl_setopt_closesocket_function(CURL *h, int (*f)(void *, curl_socket_t)) { return curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, f); }
static inline CURLcode georelay_curl_setopt_resolver_start_function(CURL *h, int (*f)(void *, void *, void *)) { return curl_easy_setopt(h, CURLOPT_RESOLVER_START_FUNCTION, f); }
static inline CURLcode georelay_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode georelay_curl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode georelay_curl_getinfo_socket(CURL *h, CURLINFO i, curl_socket_t *v) { return curl_easy_getinfo(h, i, v); }
// The uplink bill: what the kernel carried for one TCP socket, as a metered plan counts it.
// Here, beside the sockets libcurl opens, for GeoRelayForward, which imports no CLinux.
// No header of its own (they clash with Glibc's module in a whole-module build): curl.h
// brings getsockopt, and the constants are the kernel's ABI (IPPROTO_TCP 6, TCP_INFO 11).

/// The kernel's `struct tcp_info` (<linux/tcp.h>) up to `tcpi_bytes_retrans`, spelled out here:
/// including <linux/tcp.h> clashes with glibc's older copy of the struct in <netinet/tcp.h>,
/// which lacks the byte counters. The layout is the kernel's ABI, which only ever grows at the
/// end; `WireMeterTests` checks the counters against bytes it sent itself.
struct georelay_kernel_tcp_info {
    unsigned char state, ca_state, retransmits, probes, backoff, options, wscale, rate_flags;
    unsigned int rto, ato, snd_mss, rcv_mss;
    unsigned int unacked, sacked, lost, retrans, fackets;
    unsigned int last_data_sent, last_ack_sent, last_data_recv, last_ack_recv;
    unsigned int pmtu, rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering;
    unsigned int rcv_rtt, rcv_space;
    unsigned int total_retrans;
    unsigned long long pacing_rate, max_pacing_rate;
    unsigned long long bytes_acked, bytes_received;
    unsigned int segs_out, segs_in;
    unsigned int notsent_bytes, min_rtt, data_segs_in, data_segs_out;
    unsigned long long delivery_rate;
    unsigned long long busy_time, rwnd_limited, sndbuf_limited;
    unsigned int delivered, delivered_ce;
    unsigned long long bytes_sent, bytes_retrans;
};

/// One TCP socket's lifetime counters from TCP_INFO: payload bytes each way (sent counts
/// retransmissions, as the link carried them) and segments each way (each with its IP and TCP
/// headers). `ok` is 0 when the kernel cannot say (not a TCP socket, a kernel before 4.19).
struct georelay_tcp_counts {
    int ok;
    unsigned long long bytes_sent;
    unsigned long long bytes_received;
    unsigned long long bytes_retrans;
    unsigned long long segs_out;
    unsigned long long segs_in;
};
static inline struct georelay_tcp_counts georelay_read_tcp_counts(int fd) {
    struct georelay_tcp_counts out;
    __builtin_memset(&out, 0, sizeof out);
    struct georelay_kernel_tcp_info info;
    __builtin_memset(&info, 0, sizeof info);
    socklen_t length = sizeof info;
    if (getsockopt(fd, 6 /* IPPROTO_TCP */, 11 /* TCP_INFO */, &info, &length) != 0) return out;
    // Older kernels fill less of the struct: every field read must be inside what they wrote.
    if ((size_t)length < __builtin_offsetof(struct georelay_kernel_tcp_info, bytes_retrans) + sizeof info.bytes_retrans)
        return out;
    out.ok = 1;
    out.bytes_sent = info.bytes_sent;
    out.bytes_received = info.bytes_received;
    out.bytes_retrans = info.bytes_retrans;
    out.segs_out = info.segs_out;
    out.segs_in = info.segs_in;
    return out;
}
#endif
