"""The one place where typed results become published names (reference/000, 001, 004).

Every key a run publishes is written here, from typed values:
- Databricks per row: `response/llm_judged/{judge}/rating|rationale|error_message`,
  `retrieval/llm_judged/{judge}/ratings|rationales|error_messages|precision` (plus the row-level
  `error_message` and `unjudged_chunk_count`), `response/aspect_critic/{name}/...|verdicts`, and
  each deterministic metric's field; per run, the aggregate and count names (`run_metrics`).
- Sessions: `session/llm_judged/{judge}/rating|rationale|error_message` like an answer judge;
  per turn `turn/llm_judged/{judge}/ratings|rationales|error_messages` (one per assistant turn),
  `turn_pass_rate`, `rating` (every rated turn passed), `rationale`, `error_message`,
  `unjudged_turn_count`; per run `…/rating/percentage` over sessions, `…/turns/percentage`
  pooled over turns with `…/turns/rated_count|error_count|unjudged_count`, and
  `…/turn_pass_rate/average` (the mean share of a session's turns that pass).
- Pairwise: a pair's `pairwise/...` fields (`pair_fields`), the Nova and reconciled blocks
  (`pairwise_metric_fields`, `NOVA_FIELDS`), the length-controlled win rate
  (`LENGTH_CONTROL_FIELDS`), a regression row's head-to-head fields.
- A panel of judge models: per row `{prefix}/panel/{n}/model|rating|rationale|error_message`
  (or `…/ratings|rationales|error_messages`, one per prompt asked); per run
  `{prefix}/panel/{n}/rate|rated_count|error_count`, `{prefix}/panel/{i}-{j}/agreement`,
  `{prefix}/panel/fleiss_kappa…` and `{prefix}/panel/one_vote_share` (`panel_metrics`); a
  head-to-head panel's the same under `pairwise/panel/` (`pair_panel_metrics`).
- Calibration: `calibration/{key}/{stat}` and the per-row `calibration/{key}/disagrees`; a
  panel member's `calibration/{key}/panel/{n}/{stat}`.
- Per tag: `tag/{tag}/{name}`.
- The cost ledger: `cost/{stat}`, `cost/phase/{phase}/{stat}`, `cost/judge/{judge}/{stat}`,
  a panel's `cost/model/{model}/{stat}`.

Reading a published run back (as a regression baseline, or a calibration source) is
judges/names/metric_fields.py's job, the one reader.

One module per family of names: rows.py (Databricks), counts.py, panel.py, cost.py, tags.py,
pairwise.py, calibration.py, registry.py.
May import judges/ top-level modules, judges/model and judges/pairwise.
"""
