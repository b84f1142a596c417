"""Time `init_cuda_graph_state` (metric `init_ms`: the fastest call after the warm-up) for a backend with
every feature enabled, and its first call alone (`first_call_ms`: the first warm-up call, timed apart).

Each call starts from a backend without graph state (on CPU: on freshly mapped host memory,
as at server start-up; on CUDA: from PyTorch's caching allocator)."""

from _common import BenchWorld, emit, fresh_host_memory, parse_args, time_ms

MAX_BS = 160
STATE = (
    "decode_cuda_graph_metadata",
    "decode_cuda_graph_local_attn_metadata",
    "draft_decode_metadata_topk_normal",
    "draft_decode_metadata_topk_expand",
    "target_verify_metadata",
    "encoder_metadata",
)


def main():
    args = parse_args(__doc__, repeats=20, warmup=2)
    if args.device.type == "cpu":
        fresh_host_memory()
    world = BenchWorld(
        args.device, page_size=1, max_context_len=8192, max_reqs=2, layers=1,
        attention_chunk_size=8192, topk=4, speculative_num_steps=5, speculative_step_id=1,
        speculative_num_draft_tokens=8, is_encoder_decoder=True, max_encoder_len=1500,
    )
    backend = world.backend

    def drop_state():
        for name in STATE:
            backend.__dict__.pop(name, None)

    def init():
        backend.init_cuda_graph_state(MAX_BS, MAX_BS * 8)

    # the first call alone, as a server's start-up pays it (nothing ran before it here), then the rest
    first = time_ms(init, 1, 0, args.device, setup=drop_state) if args.warmup else []
    times = time_ms(init, args.repeats, max(args.warmup - 1, 0), args.device, setup=drop_state)
    emit("init_ms", times)
    emit("first_call_ms", first or times[:1])


if __name__ == "__main__":
    main()
