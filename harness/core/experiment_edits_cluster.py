"""The text edits of the Hopper cluster experiment: h14 launched as clusters of two CTAs that share
every K and V tile through TMA multicast (harness/core/experiment_edits.py has the format;
harness/core/experiments.py the registry). It exercises on the H200 the cluster mechanisms the
2-CTA Blackwell steps (b13, b14) rely on: a cluster launch, mbarrier init -> fence -> cluster
barrier before any remote traffic, remote mbarrier arrives (mapa), a multicast TMA load landing
on both CTAs' barriers, and a cluster barrier before exit."""

# h14 as clusters of two CTAs (66 on the H200's 132 SMs). A cluster walks pairs of neighbouring
# query blocks of one (batch, head); each CTA loads its own Q but only half of every K and V tile,
# multicast into both CTAs' smem and onto both CTAs' full barriers (each still expects the whole
# tile's bytes). Either CTA's load writes a stage in both, so a stage is free only when the
# consumers of both have read it: the empty barriers count 16 warps, and each consumer warp
# arrives on its own CTA's and, through mapa, on the other's. seqlen: a multiple of 256.
H14_CLUSTER_MULTICAST = (
    ('"""h14 — persistent CTAs: one CTA per SM walks a static list of tiles; the next tile\'s Q, K and V\n'
     'load while this tile\'s last P V and epilogue run.\n',
     '"""exp:h14-cluster-multicast — h14 launched as clusters of two CTAs on neighbouring query blocks of\n'
     'one (batch, head), each CTA loading half of every K and V tile and multicasting it into both. The\n'
     'cluster code is what `ladder diff h14 exp:h14-cluster-multicast` shows; the rest of this\n'
     'docstring is h14\'s.\n'),
    ("SM_COUNT = 132\n",
     "SM_COUNT = 132\n"
     "# Clusters: two CTAs (two SMs) take neighbouring query blocks of one (batch, head) and load each\n"
     "# K and V tile once between them: each loads half and multicasts it into both.\n"
     "CLUSTER_CTAS = 2\n"
     "BOTH_CTAS = (1 << CLUSTER_CTAS) - 1    # the multicast mask (an Int16 in the copy): CTA ranks 0 and 1\n"),
    ("    load = cpasync.CopyBulkTensorTileG2SOp()\n"
     "    return (cpasync.make_tiled_tma_atom(load, q, sQ_layout, (TILE_M, HEAD_DIM)),\n"
     "            cpasync.make_tiled_tma_atom(load, k, cute.select(sK_layout, mode=[0, 1]), (TILE_N, HEAD_DIM)),\n"
     "            cpasync.make_tiled_tma_atom(load, vt, cute.select(sVt_layout, mode=[0, 1]), (HEAD_DIM, TILE_N)))\n",
     "    load = cpasync.CopyBulkTensorTileG2SOp()\n"
     "    # K and V: multicast atoms. A CTA's copy is 1/CLUSTER_CTAS of the tile, written into every CTA\n"
     "    # of the copy's mask.\n"
     "    shared = cpasync.CopyBulkTensorTileG2SMulticastOp()\n"
     "    return (cpasync.make_tiled_tma_atom(load, q, sQ_layout, (TILE_M, HEAD_DIM)),\n"
     "            cpasync.make_tiled_tma_atom(shared, k, cute.select(sK_layout, mode=[0, 1]), (TILE_N, HEAD_DIM),\n"
     "                                        num_multicast=CLUSTER_CTAS),\n"
     "            cpasync.make_tiled_tma_atom(shared, vt, cute.select(sVt_layout, mode=[0, 1]), (HEAD_DIM, TILE_N),\n"
     "                                        num_multicast=CLUSTER_CTAS))\n"),
    ("        grid=grid, block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream)\n",
     "        grid=grid, block=[THREADS, 1, 1], cluster=[CLUSTER_CTAS, 1, 1], smem=SharedStorage.size_in_bytes(),\n"
     "        stream=stream)\n"),
    ("    cta, _, _ = cute.arch.block_idx()\n"
     "    n_ctas, _, _ = cute.arch.grid_dim()\n",
     "    # Clusters walk the work: cluster c takes pairs c, c + n_clusters, ... of neighbouring query\n"
     "    # blocks; CTA cta_rank of the cluster takes block CLUSTER_CTAS * pair + cta_rank.\n"
     "    cluster, _, _ = cute.arch.cluster_idx()\n"
     "    n_clusters, _, _ = cute.arch.cluster_dim()\n"
     "    cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())\n"),
    ("    # The work: m_blocks x heads x batch tiles; this CTA's are cta, cta + n_ctas, ...\n",
     "    # The work: m_blocks / 2 x heads x batch pairs of tiles; this cluster's are cluster,\n"
     "    # cluster + n_clusters, ... (both CTAs walk the same number, in step).\n"),
    ("    n_tiles = tiles_of(cta, n_ctas, m_blocks * heads * cute.size(tma_mQ.shape[3]))\n",
     "    n_tiles = tiles_of(cluster, n_clusters, m_blocks // CLUSTER_CTAS * heads * cute.size(tma_mQ.shape[3]))\n"),
    ("                    cute.arch.mbarrier_init(empty + stage, NUM_CONSUMER_WARPS)\n",
     "                    # both CTAs' consumer warps: either CTA's load writes the stage in both\n"
     "                    cute.arch.mbarrier_init(empty + stage, CLUSTER_CTAS * NUM_CONSUMER_WARPS)\n"),
    ("    cute.arch.mbarrier_init_fence()\n    cute.arch.sync_threads()\n",
     "    # barrier (cluster): the other CTA's barriers are initialised before anyone arrives on them\n"
     "    # remotely or a multicast lands on them; the fence makes the inits visible to the cluster.\n"
     "    cute.arch.mbarrier_init_fence()\n"
     "    cute.arch.cluster_arrive_relaxed()\n"
     "    cute.arch.cluster_wait()\n"),
    ("v_empty, cta, n_ctas, m_blocks, heads, n_tiles,\n                     n_blocks)\n",
     "v_empty, cluster, n_clusters, cta_rank, m_blocks,\n                     heads, n_tiles, n_blocks)\n"),
    ("                 softmax_scale, cta, n_ctas, m_blocks, heads, n_tiles, n_blocks, warp_idx)\n",
     "                 softmax_scale, cluster, n_clusters, cta_rank, m_blocks, heads, n_tiles, n_blocks, warp_idx)\n"
     "    # barrier (cluster): neither CTA exits while the other may still arrive on its empty barriers\n"
     "    # (a remote arrive into an exited CTA's smem is undefined). Every thread of both CTAs takes it.\n"
     "    cute.arch.cluster_arrive()\n"
     "    cute.arch.cluster_wait()\n"),
    ("v_empty, cta, n_ctas, m_blocks, heads, n_tiles,\n             n_blocks):\n",
     "v_empty, cluster, n_clusters, cta_rank, m_blocks,\n             heads, n_tiles, n_blocks):\n"),
    ("softmax_scale: cutlass.Float32, cta, n_ctas, m_blocks, heads, n_tiles, n_blocks, warp_idx):\n",
     "softmax_scale: cutlass.Float32, cluster, n_clusters, cta_rank, m_blocks, heads, n_tiles,\n"
     "             n_blocks, warp_idx):\n"),
    ("    def tma_partition(atom, smem, gmem):\n"
     "        return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(smem, 0, 2),\n",
     "    def tma_partition(atom, smem, gmem, cta_coord=0, ctas=1):\n"
     "        return cpasync.tma_partition(atom, cta_coord, cute.make_layout(ctas), cute.group_modes(smem, 0, 2),\n"),
    ("    # expect-tx counts one tile's bytes: what one K copy (or one V copy) delivers.\n",
     "    # expect-tx counts one tile's bytes: what the two CTAs' K copies (or V copies) deliver here.\n"),
    ("        m_block, head, batch = tile_coords(cta + tile_iter * n_ctas, m_blocks, heads)\n"
     "        gQ, gK, gVt, _ =",
     "        pair, head, batch = tile_coords(cluster + tile_iter * n_clusters, m_blocks // CLUSTER_CTAS, heads)\n"
     "        m_block = pair * CLUSTER_CTAS + cta_rank\n"
     "        gQ, gK, gVt, _ ="),
    ("        m_block, head, batch = tile_coords(cta + tile_iter * n_ctas, m_blocks, heads)\n"
     "        _, _, _, gO =",
     "        pair, head, batch = tile_coords(cluster + tile_iter * n_clusters, m_blocks // CLUSTER_CTAS, heads)\n"
     "        m_block = pair * CLUSTER_CTAS + cta_rank\n"
     "        _, _, _, gO ="),
    ("        tKsK, tKgK = tma_partition(tma_K, sK, gK)\n        tVsV, tVgV = tma_partition(tma_V, sVt, gVt)\n",
     "        # K and V: this CTA's half of each tile (rank cta_rank of CLUSTER_CTAS), multicast into both.\n"
     "        tKsK, tKgK = tma_partition(tma_K, sK, gK, cta_rank, CLUSTER_CTAS)\n"
     "        tVsV, tVgV = tma_partition(tma_V, sVt, gVt, cta_rank, CLUSTER_CTAS)\n"),
    ("tKsK[None, stage], tma_bar_ptr=k_full + stage)\n",
     "tKsK[None, stage], tma_bar_ptr=k_full + stage, mcast_mask=cutlass.Int16(BOTH_CTAS))\n"),
    ("tKsK[None, k_stage], tma_bar_ptr=k_full + k_stage)\n",
     "tKsK[None, k_stage], tma_bar_ptr=k_full + k_stage,\n"
     "                          mcast_mask=cutlass.Int16(BOTH_CTAS))\n"),
    ("tVsV[None, stage], tma_bar_ptr=v_full + stage)\n",
     "tVsV[None, stage], tma_bar_ptr=v_full + stage, mcast_mask=cutlass.Int16(BOTH_CTAS))\n"),
    # The consumers' four releases of a K/V stage: on both CTAs' empty barriers (rank r: mapa).
    ("\n        with cute.arch.elect_one():\n            cute.arch.mbarrier_arrive(k_empty + stage)\n",
     "\n        with cute.arch.elect_one():\n            release_in_cluster(k_empty + stage)\n"),
    ("\n            with cute.arch.elect_one():\n                cute.arch.mbarrier_arrive(k_empty + stage)\n",
     "\n            with cute.arch.elect_one():\n                release_in_cluster(k_empty + stage)\n"),
    ("cute.arch.mbarrier_arrive(v_empty + prev_stage)\n", "release_in_cluster(v_empty + prev_stage)\n"),
    ("cute.arch.mbarrier_arrive(v_empty + last_stage)\n", "release_in_cluster(v_empty + last_stage)\n"),
    ("\ndef online_softmax(",
     "\ndef release_in_cluster(empty):\n"
     "    \"\"\"Arrive on K/V empty barrier ``empty`` of every CTA of the cluster (mbarrier.arrive on the\n"
     "    address mapa gives for rank r, this CTA's own included): either CTA's next load writes the\n"
     "    stage in both.\"\"\"\n"
     "    for rank in range(CLUSTER_CTAS):\n"
     "        cute.arch.mbarrier_arrive(empty, rank)\n\n\n"
     "def online_softmax("),
    ('           "kv_stages": NUM_STAGES,',
     '           "kv_stages": NUM_STAGES, "cluster_ctas": CLUSTER_CTAS,'),
    ("\nattention = contract.make_attention(INFO, host)\n",
     "\n_attention = contract.make_attention(INFO, host)\n"
     "# A cluster covers CLUSTER_CTAS x TILE_M query rows: the input checks hold seqlen to that unit.\n"
     "_CLUSTER_INFO = contract.StepInfo(**{**vars(INFO), \"tile_m\": CLUSTER_CTAS * INFO.tile_m})\n\n\n"
     "def attention(q, k, v, softmax_scale=None):\n"
     "    contract.validate_inputs(_CLUSTER_INFO, q, k, v, softmax_scale)\n"
     "    return _attention(q, k, v, softmax_scale)\n"),
)
