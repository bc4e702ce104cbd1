package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// digestPiece is the read size of digest: two such buffers are in use.
const digestPiece = 4 << 20

// digest is the size and sha256 of the file at path, read at disk speed:
// large sequential reads in one goroutine while another hashes the
// previous piece.
func digest(path string) (manifestEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return manifestEntry{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	type piece struct {
		b   []byte
		err error
	}
	full, free := make(chan piece, 2), make(chan []byte, 2)
	free <- make([]byte, digestPiece)
	free <- make([]byte, digestPiece)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			n, err := io.ReadFull(f, b)
			if err == io.ErrUnexpectedEOF {
				err = nil
			}
			select {
			case full <- piece{b[:n], err}:
			case <-stop:
				return
			}
			if err != nil || n < len(b) {
				return
			}
		}
	}()
	h := sha256.New()
	var n int64
	for {
		p := <-full
		h.Write(p.b)
		n += int64(len(p.b))
		if p.err == io.EOF || p.err == nil && len(p.b) < digestPiece {
			break
		}
		if p.err != nil {
			return manifestEntry{}, fmt.Errorf("checkpoint: reading %s: %w", path, p.err)
		}
		free <- p.b[:cap(p.b)]
	}
	return manifestEntry{Name: filepath.Base(path), Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
