"""Time `init_cuda_graph_state` (metric `init_ms`) for a backend with every feature enabled."""

from _common import BenchWorld, emit, parse_args, time_ms

MAX_BS = 160


def main():
    args = parse_args(__doc__, repeats=40, warmup=3)
    world = BenchWorld(
        args.device, page_size=1, max_context_len=8192, max_reqs=4, layers=1,
        attention_chunk_size=8192, topk=4, speculative_num_steps=5, speculative_step_id=1,
        speculative_num_draft_tokens=8, is_encoder_decoder=True, max_encoder_len=1500,
    )
    backend = world.backend
    times = time_ms(lambda: backend.init_cuda_graph_state(MAX_BS, MAX_BS * 8), args.repeats, args.warmup, args.device)
    emit("init_ms", times)


if __name__ == "__main__":
    main()
