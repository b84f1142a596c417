"""One decode step through the graph runner (metric `decode_ms`): copy the inputs into the
static buffers, prepare the metadata, replay the captured graph."""

from _common import BenchWorld, emit, parse_args, time_ms

from miniattn import ForwardMode, GraphRunner

BS = 4


def main():
    args = parse_args(__doc__, repeats=100, warmup=5)
    world = BenchWorld(
        args.device, page_size=16, max_context_len=512, max_reqs=BS + 1, heads=4, kv_heads=2, head_dim=32, seed=1
    )
    batch = world.batch("decode", BS)
    runner = GraphRunner(
        world.model, world.backend, world.pool, world.kv, capture_bs=[BS], forward_mode=ForwardMode.DECODE
    )
    emit("decode_ms", time_ms(lambda: runner.replay(batch), args.repeats, args.warmup, args.device))


if __name__ == "__main__":
    main()
