package sim

import (
	"bytes"
	"testing"
)

// FuzzReadMessage feeds arbitrary bytes to the transport decoder: it must never
// panic nor allocate past maxMessageData, and whatever it accepts must encode
// back to the same header fields and data.
func FuzzReadMessage(f *testing.F) {
	f.Add(appendMessage(nil, message{cmd: cmdCNXN, arg0: 0x01000001, arg1: 1 << 20, data: []byte("host::features=shell_v2\x00")}))
	f.Add(appendMessage(nil, message{cmd: cmdOPEN, arg0: 7, data: []byte("shell,v2,raw:echo hi\x00")}))
	f.Add(appendMessage(nil, message{cmd: cmdWRTE, arg0: 7, arg1: 1, data: []byte("STA2\x04\x00\x00\x00/sdc")}))
	f.Add([]byte("CNXN\x00\x00\x00\x00garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			m, err := readMessage(r)
			if err != nil {
				return
			}
			if len(m.data) > maxMessageData {
				t.Fatalf("accepted %d bytes of data", len(m.data))
			}
			enc := appendMessage(nil, m)
			m2, err := readMessage(bytes.NewReader(enc))
			if err != nil || m2.cmd != m.cmd || m2.arg0 != m.arg0 || m2.arg1 != m.arg1 || !bytes.Equal(m2.data, m.data) {
				t.Fatalf("round trip of %v: %v %v", m, m2, err)
			}
		}
	})
}

// FuzzReadSyncRequest: the sync request decoder never panics and never accepts
// a path longer than syncMaxPath.
func FuzzReadSyncRequest(f *testing.F) {
	f.Add([]byte("STA2\x0e\x00\x00\x00/sdcard/a.txtSEND\x10\x00\x00\x00/data/x.apk,33188"))
	f.Add([]byte("RECV\xff\xff\xff\xff"))
	f.Add([]byte("QUIT\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			req, err := readSyncRequest(r)
			if err != nil {
				return
			}
			if len(req.path) > syncMaxPath {
				t.Fatalf("accepted a %d-byte path", len(req.path))
			}
		}
	})
}
