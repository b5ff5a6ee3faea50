package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ADB transport message commands (system/core/adb/adb.h, "protocol.txt").
const (
	cmdSYNC = 0x434e5953
	cmdCNXN = 0x4e584e43
	cmdOPEN = 0x4e45504f
	cmdOKAY = 0x59414b4f
	cmdCLSE = 0x45534c43
	cmdWRTE = 0x45545257
	cmdAUTH = 0x48545541
	cmdSTLS = 0x534c5453
)

const (
	// protocolVersion 0x01000001 tells the host we skip data checksums.
	protocolVersion = 0x01000001
	// deviceMaxData is what the device advertises in CNXN (1 MiB, as adbd does).
	deviceMaxData = 1 << 20
	// maxMessageData bounds what the decoder accepts from a host; the host never
	// sends more than its own MAX_PAYLOAD (1 MiB on 1.0.41).
	maxMessageData = 1 << 20
	headerSize     = 24
)

// message is one ADB transport message: a 24-byte little-endian header
// (command, arg0, arg1, data length, data crc32, magic = command ^ 0xffffffff)
// followed by the data.
type message struct {
	cmd  uint32
	arg0 uint32
	arg1 uint32
	data []byte
}

var errBadMagic = errors.New("adb message: bad magic")

func cmdName(c uint32) string {
	switch c {
	case cmdSYNC, cmdCNXN, cmdOPEN, cmdOKAY, cmdCLSE, cmdWRTE, cmdAUTH, cmdSTLS:
		b := make([]byte, 4)
		binary.LittleEndian.PutUint32(b, c)
		return string(b)
	}
	return fmt.Sprintf("0x%08x", c)
}

func (m message) String() string {
	return fmt.Sprintf("%s(%d, %d, %d bytes)", cmdName(m.cmd), m.arg0, m.arg1, len(m.data))
}

// readMessage decodes one message. It rejects a bad magic, an unknown command
// and a data length over maxMessageData, so a corrupt peer cannot make it
// allocate without bound. Checksums are not checked (version 0x01000001).
func readMessage(r io.Reader) (message, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return message{}, err
	}
	m := message{
		cmd:  binary.LittleEndian.Uint32(h[0:]),
		arg0: binary.LittleEndian.Uint32(h[4:]),
		arg1: binary.LittleEndian.Uint32(h[8:]),
	}
	n := binary.LittleEndian.Uint32(h[12:])
	magic := binary.LittleEndian.Uint32(h[20:])
	if magic != m.cmd^0xffffffff {
		return message{}, errBadMagic
	}
	switch m.cmd {
	case cmdSYNC, cmdCNXN, cmdOPEN, cmdOKAY, cmdCLSE, cmdWRTE, cmdAUTH, cmdSTLS:
	default:
		return message{}, fmt.Errorf("adb message: unknown command %s", cmdName(m.cmd))
	}
	if n > maxMessageData {
		return message{}, fmt.Errorf("adb message: %s data length %d over %d", cmdName(m.cmd), n, maxMessageData)
	}
	if n > 0 {
		m.data = make([]byte, n)
		if _, err := io.ReadFull(r, m.data); err != nil {
			return message{}, err
		}
	}
	return m, nil
}

// appendMessage encodes m. The checksum field carries the byte sum, as adbd
// still fills it for old hosts; hosts of version >= 0x01000001 ignore it.
func appendMessage(b []byte, m message) []byte {
	var sum uint32
	for _, c := range m.data {
		sum += uint32(c)
	}
	b = binary.LittleEndian.AppendUint32(b, m.cmd)
	b = binary.LittleEndian.AppendUint32(b, m.arg0)
	b = binary.LittleEndian.AppendUint32(b, m.arg1)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.data)))
	b = binary.LittleEndian.AppendUint32(b, sum)
	b = binary.LittleEndian.AppendUint32(b, m.cmd^0xffffffff)
	return append(b, m.data...)
}
