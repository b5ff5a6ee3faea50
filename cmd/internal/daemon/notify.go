package daemon

import (
	"net"
	"os"
)

// notifySystemd sends state (e.g. "READY=1") to the service manager's
// $NOTIFY_SOCKET (sd_notify(3): a datagram on a unix socket; a leading @
// is an abstract socket) — the unit's Type=notify readiness. Without
// NOTIFY_SOCKET (not started by systemd) it does nothing.
func notifySystemd(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
