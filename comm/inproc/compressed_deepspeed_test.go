package inproc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
)

// deepSpeedCompressed is a golden file of gen_onebit_golden.py: DeepSpeed's
// compressed all-reduce, call by call, on some of a GPT's parameters in a
// real 1-bit Adam run.
type deepSpeedCompressed struct {
	Command string `json:"command"`
	World   int    `json:"world_size"`
	Tensors []struct {
		Param  int    `json:"param"`
		Name   string `json:"name"`
		Padded int    `json:"padded"`
		Calls  []struct {
			In, Out, Worker, Server []string // per rank, base64 little-endian float32
		} `json:"calls"`
	} `json:"tensors"`
}

func decodeF32(s string) ([]float32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		return nil, fmt.Errorf("not base64 float32 data (%d bytes): %v", len(b), err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// TestCompressedDeepSpeedGPT replays the compressed all-reduce of real
// DeepSpeed 0.14.5 1-bit Adam runs on the GPT at 2 and 3 ranks
// (testdata/deepspeed_compressed_gpt_w*.json, conformance/reference/
// gen_onebit_golden.py): each rank's padded momentum goes in as DeepSpeed
// had it, three calls in a row carrying dszero's own error feedback, and
// the result, the worker error and the server error must equal
// DeepSpeed's bit for bit. The tensors include the 3-rank padding of 64
// and 192 elements to multiples of 72. The scales decide every element
// of a chunk, so a scale one ulp off fails it: summing the norms in
// float64, as dszero did, did (the scales differed from torch's in the
// last bit on most tensors).
func TestCompressedDeepSpeedGPT(t *testing.T) {
	for _, file := range []string{"testdata/deepspeed_compressed_gpt_w2.json", "testdata/deepspeed_compressed_gpt_w3.json"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var g deepSpeedCompressed
		if err := json.Unmarshal(raw, &g); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, ts := range g.Tensors {
			t.Run(fmt.Sprintf("world=%d/%s", g.World, ts.Name), func(t *testing.T) {
				err := New(g.World, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
					r := c.Rank()
					z := comm.NewCompressor(c)
					ef := comm.NewErrorFeedback(ts.Padded, g.World, r)
					for k, call := range ts.Calls {
						x, err := decodeF32(call.In[r])
						if err != nil {
							return err
						}
						if len(x) != ts.Padded {
							return fmt.Errorf("call %d: %d elements, want %d", k+1, len(x), ts.Padded)
						}
						if err := z.AllReduce(context.Background(), x, &ef); err != nil {
							return err
						}
						for _, cmpr := range []struct {
							what string
							got  []float32
							want string
						}{{"result", x, call.Out[r]}, {"worker error", ef.Worker, call.Worker[r]}, {"server error", ef.Server, call.Server[r]}} {
							want, err := decodeF32(cmpr.want)
							if err != nil {
								return err
							}
							if len(want) != len(cmpr.got) {
								return fmt.Errorf("rank %d, call %d, %s: %d elements, DeepSpeed's %d", r, k+1, cmpr.what, len(cmpr.got), len(want))
							}
							for i := range want {
								if math.Float32bits(cmpr.got[i]) != math.Float32bits(want[i]) {
									return fmt.Errorf("rank %d, call %d, %s element %d: %v, DeepSpeed's %v", r, k+1, cmpr.what, i, cmpr.got[i], want[i])
								}
							}
						}
					}
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
	}
}
