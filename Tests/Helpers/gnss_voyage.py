#!/usr/bin/env python3
"""A vessel's GNSS receivers at sea, as the relay hears them, with an attack injected.

Writes one line per sentence: `<ms> <receiver> <sentence>`, where <ms> is the relay's
monotonic clock when the line arrives, then `# ` lines that state what was injected and when
(`# attack-starts-ms`, `# evidence-ms`: when the attack shows in what the receivers report).

The vessel sails at --knots on a slowly turning course; each receiver's antenna sits on the
hull's centre line, --separation metres apart, with a correlated error of its own (about 2 m)
and one the receivers share. Every second each receiver sends GPGSV (10 satellites, C/N0 by
elevation), GPGGA and GPRMC; with --format gpsd, gpsd's reports of the same instead: a SKY
(each satellite's `ss` and whether the fix used it) and a TPV (mode 3, or mode 1 without a fix),
named by the receiver as the collector's gpsd source names them.

Attacks, on the first --victims receivers (all of them for `converge`):
  none      clean sailing.
  jump      meaconing: from --at, the victims report a position --jump-km away (and move on
            from there with the vessel's velocity).
  pull      a slow pull: from --at, the victims' fixes drift off the track at --pull m/s,
            square to the course; their reported velocity includes the pull, as a spoofer's
            signals make it.
  replay    from --at, the victims replay what they reported --replay-age seconds before,
            their times included.
  jam       from --at, the victims' C/N0 falls to nothing over --ramp seconds; a receiver with
            fewer than 4 satellites above 20 dB-Hz loses its fix (RMC V, GGA 0).
  converge  one spoofer for all: from --at, every receiver reports the same false solution, the
            true track moved --offset metres, with the spoofer's uniform C/N0.
Standard library only; the same --seed writes the same voyage.
"""
import argparse
import json
import math
import random
import sys

R = 6371008.8


def checksum(body):
    c = 0
    for ch in body.encode():
        c ^= ch
    return "$%s*%02X" % (body, c)


def move(lat, lon, north, east):
    return (lat + math.degrees(north / R), lon + math.degrees(east / (R * math.cos(math.radians(lat)))))


def nmea_lat(lat):
    d = int(abs(lat))
    return "%02d%08.5f,%s" % (d, (abs(lat) - d) * 60, "N" if lat >= 0 else "S")


def nmea_lon(lon):
    d = int(abs(lon))
    return "%03d%08.5f,%s" % (d, (abs(lon) - d) * 60, "E" if lon >= 0 else "W")


class Noise:
    """First-order Gauss-Markov: correlated over about a minute, sigma metres."""

    def __init__(self, rng, sigma, tau=60.0):
        self.rng, self.sigma, self.a = rng, sigma, math.exp(-1.0 / tau)
        self.n, self.e = rng.gauss(0, sigma), rng.gauss(0, sigma)

    def step(self):
        s = self.sigma * math.sqrt(1 - self.a * self.a)
        self.n = self.a * self.n + self.rng.gauss(0, s)
        self.e = self.a * self.e + self.rng.gauss(0, s)
        return self.n, self.e


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attack", default="none", choices=["none", "jump", "pull", "replay", "jam", "converge"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--receivers", type=int, default=2)
    p.add_argument("--victims", type=int, default=1)
    p.add_argument("--separation", type=float, default=10.0)
    p.add_argument("--seconds", type=int, default=900)
    p.add_argument("--at", type=int, default=600, help="when the attack starts, seconds into the voyage")
    p.add_argument("--knots", type=float, default=12.0)
    p.add_argument("--pull", type=float, default=1.0)
    p.add_argument("--jump-km", type=float, default=3.2)
    p.add_argument("--replay-age", type=int, default=300)
    p.add_argument("--ramp", type=float, default=30.0)
    p.add_argument("--offset", type=float, default=200.0)
    p.add_argument("--format", default="nmea", choices=["nmea", "gpsd"])
    a = p.parse_args()
    rng = random.Random(a.seed)
    names = ["gps%d" % (i + 1) for i in range(a.receivers)]
    victims = names if a.attack == "converge" else names[: a.victims]
    start_ms = 1_784_953_800_000  # 2026-07-25 04:30 UTC
    common = Noise(rng, 1.5)
    own = {n: Noise(rng, 1.5) for n in names}
    sky = [(rng.randint(1, 32), rng.uniform(10, 80), rng.uniform(0, 360)) for _ in range(10)]
    lat, lon, course = 59.0, 10.9, rng.uniform(0, 360)
    speed = a.knots * 1852 / 3600
    history = {n: [] for n in names}  # what each receiver sent, per second, for replay
    lag = {n: rng.randint(30, 250) for n in names}  # serial line and collector, ms
    out = []
    evidence_ms = None
    for t in range(a.seconds):
        course = (course + rng.gauss(0, 0.3)) % 360
        north, east = speed * math.cos(math.radians(course)), speed * math.sin(math.radians(course))
        lat, lon = move(lat, lon, north, east)
        cn, ce = common.step()
        attacking = a.attack != "none" and t >= a.at
        for i, name in enumerate(names):
            along = (i - (a.receivers - 1) / 2) * a.separation
            on, oe = own[name].step()
            rlat, rlon = move(lat, lon, along * math.cos(math.radians(course)) + cn + on,
                              along * math.sin(math.radians(course)) + ce + oe)
            vn, ve = north + rng.gauss(0, 0.05), east + rng.gauss(0, 0.05)
            victim = attacking and name in victims
            snrs = [max(0.0, 22 + 26 * math.sin(math.radians(el)) + rng.gauss(0, 2.5)) for _, el, _ in sky]
            fix_time = start_ms + t * 1000
            if victim and a.attack == "jump":
                rlat, rlon = move(rlat, rlon, a.jump_km * 1000 * 0.6, a.jump_km * 1000 * 0.8)
            elif victim and a.attack == "pull":
                side = math.radians(course + 90)
                drift = a.pull * (t - a.at)
                rlat, rlon = move(rlat, rlon, drift * math.cos(side), drift * math.sin(side))
                vn, ve = vn + a.pull * math.cos(side), ve + a.pull * math.sin(side)
            elif victim and a.attack == "converge":
                rlat, rlon = move(lat, lon, a.offset + cn, ce)
                snrs = [44 + rng.gauss(0, 0.3) for _ in sky]
            elif victim and a.attack == "jam":
                fall = min(1.0, (t - a.at) / a.ramp)
                snrs = [s * (1 - fall) for s in snrs]
            if victim and a.attack == "replay" and t - a.replay_age >= 0:
                lines = history[name][t - a.replay_age]
            else:
                lines = (gpsd_reports if a.format == "gpsd" else sentences)(rng, sky, snrs, fix_time, rlat, rlon, vn, ve)
                if a.format == "gpsd":
                    lines = [line.replace('"device":""', '"device":"%s"' % name) for line in lines]
            history[name].append(lines)
            if victim and evidence_ms is None:
                if a.attack != "jam":
                    evidence_ms = t * 1000
                else:
                    heard = [s for s in snrs if s >= 20]
                    usual = 22 + 26 * sum(math.sin(math.radians(el)) for _, el, _ in sky) / len(sky)
                    if len(heard) < 4 or (sum(snrs) / len(snrs)) < usual / 2:
                        evidence_ms = t * 1000
            for k, line in enumerate(lines):
                out.append((t * 1000 + lag[name] + k, name, line))
    out.sort()
    w = sys.stdout.write
    for ms, name, line in out:
        w("%d %s %s\n" % (ms, name, line))
    w("# attack %s on %s, seed %d, %d receivers %.0f m apart, %.0f kn\n"
      % (a.attack, ",".join(victims) if a.attack != "none" else "-", a.seed, a.receivers, a.separation, a.knots))
    if a.attack != "none":
        w("# attack-starts-ms %d\n" % (a.at * 1000))
        w("# evidence-ms %d\n" % (evidence_ms if evidence_ms is not None else -1))


def sentences(rng, sky, snrs, fix_ms, lat, lon, vn, ve):
    heard = [s for s in snrs if s >= 20]
    fixed = len(heard) >= 4
    hms = fix_ms // 1000 % 86400
    tod = "%02d%02d%02d.00" % (hms // 3600, hms // 60 % 60, hms % 60)
    days = fix_ms // 86_400_000
    # Civil date from days since the epoch.
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 + (1 if m <= 2 else 0)
    date = "%02d%02d%02d" % (d, m, y % 100)
    lines = []
    groups = [list(zip(sky, snrs))[i:i + 4] for i in range(0, len(sky), 4)]
    for n, group in enumerate(groups):
        sats = ",".join("%02d,%02d,%03d,%s" % (prn, el, az, ("%02d" % round(s)) if s >= 20 else "")
                        for (prn, el, az), s in group)
        lines.append(checksum("GPGSV,%d,%d,%02d,%s" % (len(groups), n + 1, len(sky), sats)))
    knots = math.hypot(vn, ve) * 3600 / 1852
    course = math.degrees(math.atan2(ve, vn)) % 360
    if fixed:
        lines.append(checksum("GPGGA,%s,%s,%s,1,%02d,0.9,12.0,M,40.0,M,," % (tod, nmea_lat(lat), nmea_lon(lon), len(heard))))
        lines.append(checksum("GPRMC,%s,A,%s,%s,%.1f,%.1f,%s,,,A" % (tod, nmea_lat(lat), nmea_lon(lon), knots, course, date)))
    else:
        lines.append(checksum("GPGGA,%s,,,,,0,%02d,,,M,,M,," % (tod, len(heard))))
        lines.append(checksum("GPRMC,%s,V,,,,,,,%s,,,N" % (tod, date)))
    return lines


def gpsd_reports(rng, sky, snrs, fix_ms, lat, lon, vn, ve):
    heard = [s for s in snrs if s >= 20]
    fixed = len(heard) >= 4
    iso = "%s.%03dZ" % (iso_seconds(fix_ms // 1000), fix_ms % 1000)
    satellites = [{"PRN": prn, "el": round(el), "az": round(az), "ss": round(s, 1) if s >= 20 else 0,
                   "used": fixed and s >= 20} for (prn, el, az), s in zip(sky, snrs)]
    report = {"class": "SKY", "device": "", "time": iso, "hdop": 0.9 if fixed else None, "satellites": satellites}
    lines = [json.dumps({k: v for k, v in report.items() if v is not None}, separators=(",", ":"))]
    if fixed:
        tpv = {"class": "TPV", "device": "", "mode": 3, "time": iso, "lat": round(lat, 8), "lon": round(lon, 8),
               "speed": round(math.hypot(vn, ve), 3), "track": round(math.degrees(math.atan2(ve, vn)) % 360, 2)}
    else:
        tpv = {"class": "TPV", "device": "", "mode": 1, "time": iso}
    lines.append(json.dumps(tpv, separators=(",", ":")))
    return lines


def iso_seconds(seconds):
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


if __name__ == "__main__":
    main()
