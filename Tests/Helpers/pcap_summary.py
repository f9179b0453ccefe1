"""What a capture of an uplink carried, by kind, beside the relay's meter (issue 36 §4).

Usage: python3 Tests/Helpers/pcap_summary.py FILE.pcap
FILE is what `GEORELAY_BENCH_CAPTURE=FILE georelay-bench --only sea` wrote (tcpdump on `up0`,
128 bytes a packet). Prints the IP bytes of each kind (TCP, DNS, other UDP, IPv6, ARP), and of
TCP: payload each way, segments each way, header bytes beyond the 52 the meter bills a segment
(SYN options, SACK blocks), and payload sent again (a segment ending at or before the highest
sequence already seen that way), which the receiver's TCP_INFO does not count in its bytes; each
also per sender, with the data segments each side sent and how many of them went again.
"""
import struct, sys, collections
data = open(sys.argv[1], 'rb').read()
magic = struct.unpack('<I', data[:4])[0]
e = '<' if magic in (0xa1b2c3d4, 0xa1b23c4d) else '>'
link = struct.unpack(e+'I', data[20:24])[0]
off = 24
cat = collections.Counter(); catn = collections.Counter()
tcp = collections.Counter()
conns = {}
maxseq = {}
while off + 16 <= len(data):
    ts, tu, incl, orig = struct.unpack(e+'IIII', data[off:off+16]); off += 16
    pkt = data[off:off+incl]; off += incl
    if link == 1:
        et = struct.unpack('>H', pkt[12:14])[0]; ip = pkt[14:]; l2 = 14
    else:
        et = 0x0800; ip = pkt; l2 = 0
    ipbytes = orig - l2
    if et == 0x0806: cat['arp'] += ipbytes; catn['arp'] += 1; continue
    if et == 0x86dd: cat['ipv6'] += ipbytes; catn['ipv6'] += 1; continue
    if et != 0x0800: cat['other'] += ipbytes; catn['other'] += 1; continue
    ihl = (ip[0] & 15) * 4; total = struct.unpack('>H', ip[2:4])[0]; proto = ip[9]
    src = ip[12:16]; dst = ip[16:20]
    if proto == 17:
        sp, dp = struct.unpack('>HH', ip[ihl:ihl+4])
        k = 'dns' if 53 in (sp, dp) else 'udp'
        cat[k] += total; catn[k] += 1; continue
    if proto != 6: cat['ip-other'] += total; catn['ip-other'] += 1; continue
    t = ip[ihl:]
    sp, dp, seq, ack = struct.unpack('>HHII', t[:12])
    doff = (t[12] >> 4) * 4; flags = t[13]
    payload = total - ihl - doff
    hdr = ihl + doff
    cat['tcp'] += total; catn['tcp'] += 1
    tcp['headers'] += hdr; tcp['payload'] += payload; tcp['segments'] += 1
    tcp['segments_from_' + '.'.join(map(str, src))] += 1
    tcp['payload_from_' + '.'.join(map(str, src))] += payload
    tcp['headers_beyond_52'] += max(0, hdr - 52)
    key = (src, sp, dst, dp); rkey = (dst, dp, src, sp)
    c = conns.get(key) or conns.get(rkey)
    if c is None:
        c = conns[key] = {'fin': 0, 'after_fin': 0, 'bytes': 0, 'syn': 0, 'rst': 0}
    c['bytes'] += total
    if c['fin']: c['after_fin'] += total
    if flags & 2: tcp['syn'] += 1; c['syn'] += 1
    if flags & 1: tcp['fin'] += 1; c['fin'] += 1
    if flags & 4: tcp['rst'] += 1; c['rst'] += 1
    if payload == 0 and not flags & 3: tcp['pure_acks'] += 1
    if payload > 0:
        tcp['datasegs_from_' + '.'.join(map(str, src))] += 1
        end = (seq + payload) & 0xffffffff
        m = maxseq.get(key)
        if m is not None and ((end - m) & 0xffffffff) > 0x7fffffff or (m is not None and end == m):
            tcp['retrans_payload'] += payload; tcp['retrans_segments'] += 1
            tcp['retrans_payload_from_' + '.'.join(map(str, src))] += payload
            tcp['retrans_segs_from_' + '.'.join(map(str, src))] += 1
        else:
            maxseq[key] = end
total = sum(cat.values())
print('IP bytes in capture', total, 'frames', sum(catn.values()))
for k in cat: print(' ', k, cat[k], 'B in', catn[k])
for k in sorted(tcp): print('  tcp', k, tcp[k])
print('  tcp: payload + 52 per segment =', tcp['payload'] + 52 * tcp['segments'])
print('  connections', len(conns), 'bytes after the first FIN', sum(c['after_fin'] for c in conns.values()))
