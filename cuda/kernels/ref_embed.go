package kernels

import (
	"slices"

	"github.com/dszero/dszero/device"
)

func refEmbeddingFwd(dt device.DType) refFunc {
	return func(c *call) {
		N, T, C, V := c.i32(4), c.i32(5), c.i32(6), c.i32(7)
		out, tokens := c.vec(0, dt, N*C), c.i32s(1, N)
		wte, wpe := c.vec(2, dt, V*C), c.vec(3, dt, T*C)
		bad := c.u32s(8, 1)
		for r := range N {
			tok := int(tokens[r])
			for col := range C {
				if tok < 0 || tok >= V {
					out.st(r*C+col, 0)
					if bad != nil {
						bad[0] |= 1
					}
					continue
				}
				v := wte.ld(tok*C + col)
				if !c.null(3) {
					v = v + wpe.ld((r%T)*C+col)
				}
				out.st(r*C+col, v)
			}
		}
	}
}

func refEmbeddingBwdTok(dt device.DType) refFunc {
	return func(c *call) {
		nuniq, C := c.i32(5), c.i32(6)
		starts, uniq := c.i32s(3, nuniq+1), c.i32s(4, nuniq)
		if nuniq == 0 {
			return
		}
		npos := int(starts[nuniq])
		order := c.i32s(2, npos)
		maxPos, maxTok := int32(-1), int32(-1)
		if npos > 0 {
			maxPos = slices.Max(order)
		}
		maxTok = slices.Max(uniq)
		dwte, dout := c.vec(0, dt, (int(maxTok)+1)*C), c.vec(1, dt, (int(maxPos)+1)*C)
		for u := range nuniq {
			for col := range C {
				var g float32
				for j := starts[u]; j < starts[u+1]; j++ {
					g = rnd(dt, g+dout.ld(int(order[j])*C+col))
				}
				w := int(uniq[u])*C + col
				dwte.st(w, dwte.ld(w)+g)
			}
		}
	}
}

func refEmbeddingBwdPos(dt device.DType) refFunc {
	return func(c *call) {
		B, T, C := c.i32(2), c.i32(3), c.i32(4)
		dwpe, dout := c.vec(0, dt, T*C), c.vec(1, dt, B*T*C)
		for i := range T * C {
			var s float32
			for b := range B {
				s = s + dout.ld(b*T*C+i)
			}
			dwpe.st(i, dwpe.ld(i)+rnd(dt, s))
		}
	}
}

// TokenBuckets groups the positions of tokens by token, for
// embedding_bwd_tok: uniq lists the distinct tokens in increasing order,
// order the positions sorted by token and, within a token, by position,
// and bucket u is order[starts[u]:starts[u+1]].
func TokenBuckets(tokens []int32) (order, starts, uniq []int32) {
	order = make([]int32, len(tokens))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return int(tokens[a]) - int(tokens[b]) })
	for j, p := range order {
		if j == 0 || tokens[p] != tokens[order[j-1]] {
			uniq = append(uniq, tokens[p])
			starts = append(starts, int32(j))
		}
	}
	starts = append(starts, int32(len(order)))
	return order, starts, uniq
}
