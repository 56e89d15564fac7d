package siteclock

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Answer is an NTP server's answer.
type Answer struct {
	// Time is the server's clock when it answered.
	Time time.Time
	// Stratum is 1 for a server with a reference clock, one more per
	// server in between; 10 is a chronyd that stands as the site's clock.
	Stratum int
	// Synchronized is false while the server has no time to give.
	Synchronized bool
	// RefID is the server's source: its address, or a stratum-1 server's
	// four letters (GPS, PPS). chronyd standing as the site's clock gives
	// 127.127.1.1.
	RefID string
	// Offset is how far this machine's clock is behind the server's,
	// from the four timestamps (RFC 5905), the round trip's half removed.
	Offset time.Duration
}

// ntpEpoch is 1900-01-01, where NTP's seconds start.
var ntpEpoch = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)

func ntpTime(b []byte) time.Time {
	secs, frac := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	return ntpEpoch.Add(time.Duration(secs)*time.Second + time.Duration((uint64(frac)*uint64(time.Second))>>32))
}

func putNTPTime(b []byte, t time.Time) {
	d := t.Sub(ntpEpoch)
	secs := d / time.Second
	frac := (uint64(d%time.Second) << 32) / uint64(time.Second)
	binary.BigEndian.PutUint32(b, uint32(secs))
	binary.BigEndian.PutUint32(b[4:], uint32(frac))
}

// Query asks the NTP server at addr for its time, once (SNTP, RFC 4330),
// as a host's client does; ctx bounds the wait.
func Query(ctx context.Context, addr netip.AddrPort) (Answer, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr.String())
	if err != nil {
		return Answer{}, fmt.Errorf("asking %s the time: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	req := make([]byte, 48)
	req[0] = 0<<6 | 4<<3 | 3 // no leap warning, version 4, client
	t1 := time.Now()
	putNTPTime(req[40:], t1)
	if _, err := conn.Write(req); err != nil {
		return Answer{}, fmt.Errorf("asking %s the time: %w", addr, err)
	}
	resp := make([]byte, 128)
	for {
		n, err := conn.Read(resp)
		t4 := time.Now()
		if err != nil {
			return Answer{}, fmt.Errorf("asking %s the time: %w", addr, err)
		}
		a, err := parse(resp[:n], req[40:48], t1, t4)
		if errors.Is(err, errNotOurs) {
			continue // a late answer to an earlier question
		}
		if err != nil {
			return Answer{}, fmt.Errorf("asking %s the time: %w", addr, err)
		}
		return a, nil
	}
}

var errNotOurs = errors.New("an answer to another question")

// parse reads a server's answer to the question sent at t1 (origin, its
// transmit timestamp as sent), received at t4.
func parse(b, origin []byte, t1, t4 time.Time) (Answer, error) {
	if len(b) < 48 {
		return Answer{}, fmt.Errorf("an answer of %d bytes, short of NTP's 48", len(b))
	}
	if mode := b[0] & 7; mode != 4 {
		return Answer{}, fmt.Errorf("an answer in mode %d, not a server's (4)", mode)
	}
	if string(b[24:32]) != string(origin) {
		return Answer{}, errNotOurs
	}
	leap, stratum := b[0]>>6, int(b[1])
	if stratum == 0 {
		// A kiss-o'-death: the code is in the reference ID.
		return Answer{}, fmt.Errorf("the server refuses (kiss code %q)", string(b[12:16]))
	}
	a := Answer{Stratum: stratum, Synchronized: leap != 3, Time: ntpTime(b[40:])}
	if stratum == 1 {
		a.RefID = string(bytes.TrimRight(b[12:16], "\x00"))
	} else {
		a.RefID = netip.AddrFrom4([4]byte(b[12:16])).String()
	}
	t2, t3 := ntpTime(b[32:]), a.Time
	a.Offset = (t2.Sub(t1) + t3.Sub(t4)) / 2
	return a, nil
}
