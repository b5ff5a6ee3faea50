package parse

import (
	"strconv"
	"strings"
)

// TCPRow is one socket row of /proc/net/tcp or /proc/net/tcp6.
type TCPRow struct {
	State   int // st, hex in the table (01 ESTABLISHED, 0A LISTEN, …)
	TxQueue int64
	RxQueue int64
	UID     int
}

// ParseProcNetTCP parses /proc/net/tcp and /proc/net/tcp6 (one or both,
// concatenated): a header line "  sl  local_address rem_address   st
// tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode", then rows
// "   0: 0F02000A:A1B2 4E4AFA8E:01BB 01 00000000:00000000 00:00000000
// 00000000 10123 0 12345 …" (Linux net/ipv4/tcp_ipv4.c get_tcp4_sock,
// net/ipv6/tcp_ipv6.c get_tcp6_sock: fields 4 = st, 5 = tx:rx in hex, 8 = uid).
func ParseProcNetTCP(out string) []TCPRow {
	var rows []TCPRow
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimSuffix(f[0], ":")); err != nil {
			continue
		}
		st, err1 := strconv.ParseInt(f[3], 16, 32)
		tx, rx, ok := strings.Cut(f[4], ":")
		txq, err2 := strconv.ParseInt(tx, 16, 64)
		rxq, err3 := strconv.ParseInt(rx, 16, 64)
		uid, err4 := strconv.Atoi(f[7])
		if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		rows = append(rows, TCPRow{State: int(st), TxQueue: txq, RxQueue: rxq, UID: uid})
	}
	return rows
}
