package comm

import "context"

// Issuer is the five data collectives of Comm written once over a
// backend's single issue function: a backend embeds an Issuer whose Issue
// takes the collective's Args (kind, buffers, op, root) and returns its
// Handle, and gets AllReduce, ReduceScatter, AllGather, Broadcast and
// Barrier from it.
type Issuer struct {
	Issue func(ctx context.Context, a Args) Handle
}

// AllReduce issues a KindAllReduce of buf.
func (i Issuer) AllReduce(ctx context.Context, buf Buffer, op Op) Handle {
	return i.Issue(ctx, Args{Kind: KindAllReduce, Out: buf, Op: op})
}

// ReduceScatter issues a KindReduceScatter of in into out.
func (i Issuer) ReduceScatter(ctx context.Context, out, in Buffer, op Op) Handle {
	return i.Issue(ctx, Args{Kind: KindReduceScatter, Out: out, In: in, Op: op})
}

// AllGather issues a KindAllGather of in into out.
func (i Issuer) AllGather(ctx context.Context, out, in Buffer) Handle {
	return i.Issue(ctx, Args{Kind: KindAllGather, Out: out, In: in})
}

// Broadcast issues a KindBroadcast of buf from root.
func (i Issuer) Broadcast(ctx context.Context, buf Buffer, root int) Handle {
	return i.Issue(ctx, Args{Kind: KindBroadcast, Out: buf, Root: root})
}

// Barrier issues a KindBarrier.
func (i Issuer) Barrier(ctx context.Context) Handle {
	return i.Issue(ctx, Args{Kind: KindBarrier})
}
