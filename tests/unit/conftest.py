"""The unit lane's slow tests, named in one place.

``python -m pytest tests/unit -m "not slow" -n 2`` is the fast lane (README, "Quick start"; ``docs/development.md``,
"Tests"); the full suite (``.ci/run``) runs every test, these included. A unit test is listed here when it took
0.3 s of CPU or more on the 2-core machine it was measured on (2026-11-29, issue 43, at load 20-30): the static checks
(ruff and mypy over the tree), checks that start a fresh interpreter to see what an import pulls in, scans of every
module of the tree, tests that import litellm (about 7 s of CPU, once per process), and property tests with many
examples. A name listed here that its file no longer defines fails the run, so the list cannot go stale quietly.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hang_guard import SUBPROCESS_HANG_S

ROOT = Path(__file__).resolve().parents[2]

SLOW: dict[str, tuple[str, ...]] = {
    # the static checks: ruff and mypy over the tree, file sizes, layering and import homes (a scan of every module)
    "test_static_checks.py": ("*",),
    "test_import_homes.py": ("*",),
    "test_layering.py": ("*",),
    "test_connection.py": (
        "test_every_kafka_client_the_project_builds_gets_its_arguments_from_the_one_connection_builder",
        "test_security_settings_a_local_broker_would_not_use_are_refused_in_one_line",
        "test_secrets_have_no_flag",
        "test_oauthbearer_tokens_come_from_the_environment_a_file_read_at_each_connect_or_a_command",
        "test_a_certificate_that_does_not_name_the_host_is_one_line_saying_so",
    ),
    "test_honest_mode.py": (
        "test_curation_never_imports_the_registry_or_the_honest_scoring",
        "test_every_instance_template_is_never_creditable_and_recognised_as_its_kind",
        "test_feedback_never_contains_a_creditable_wording_of_any_rule",
        "test_an_agent_holding_both_rules_cites_the_side_it_followed_and_succeeds_as_with_that_side",
        "test_noisy_citations_leave_out_and_add_entries_at_their_documented_rates",  # 0.3-0.4 s (fourth session)
    ),
    # a fresh interpreter per check: what an import pulls in, what a command prints before it exits
    "test_core_imports.py": ("*",),
    "test_client.py": ("test_importing_the_client_brings_no_llm_stage_or_server_library",),
    "test_errors.py": (
        "test_worker_with_an_unknown_stage_ends_in_one_line_naming_the_valid_stages",
        "test_every_exception_class_of_the_project_is_a_combee_error_but_the_named_bugs",  # imports every module
    ),
    "test_kafka_log_mask.py": ("test_the_cli_keeps_aiokafka_at_info_under_combee_log_level_debug",),
    "test_import_off_loop.py": ("test_a_stop_during_a_slow_import_exits_without_waiting_for_it",),
    "test_slow_list.py": ("test_the_fast_lane_leaves_out_the_listed_tests_and_keeps_the_others",),
    # litellm: its import alone is about 7 s of CPU
    "test_llm_roles.py": (
        "test_each_call_is_priced_once_by_the_provider_not_again_by_litellm_or_the_roles",
        "test_a_response_without_a_price_costs_zero_with_one_warning",
        "test_a_configured_litellm_callback_still_sees_every_call",
        "test_importing_combee_core_and_llm_modules_does_not_import_litellm",
        "test_litellm_import_and_sim_call_need_no_network",
    ),
    "test_llm_openai_compatible.py": ("*",),
    # property tests and simulations with many examples or runs
    "test_budget.py": (
        "test_property_the_change_cap_holds_whatever_the_operations_and_the_budget",
        "test_property_a_version_within_budget_evicts_nothing",
        "test_property_eviction_cannot_be_steered_by_fewer_than_the_configured_evidence",
    ),
    "test_doors.py": ("test_no_foreign_name_passes_a_loopback_door",),
    "test_guard_floor.py": ("*",),
    "test_guard.py": (
        "test_a_clean_version_descends_from_the_served_one_through_versions_built_after_every_decision",
        "test_no_alarm_without_a_drop_or_before_enough_traces",
        "test_a_rollback_serves_the_judged_versions_parent_after_a_significant_drop_and_then_nothing_is_judged",
        "test_false_alarm_rate_without_a_difference_is_below_alpha",
    ),
    "test_controller.py": (
        "test_fit_recovers_exact_power_law",
        "test_decision_is_the_tolerance_plateau_of_a_noisy_fit",
        "test_fit_recovers_noisy_power_law_within_5_percent",
        "test_flat_delays_fit_alpha_zero_without_nan",
    ),
    "test_bench_honest_learning.py": ("test_the_issue_38_copier_run_scores_the_empty_playbook",),
    "test_curation_properties.py": (
        "test_property_use_tags_from_fewer_traces_than_the_evidence_do_not_change_what_a_version_evicts",
        "test_property_the_merge_keeps_every_adds_support_and_every_tag_merged_or_contested",
        "test_property_a_correction_never_increases_the_counters_of_the_rule_it_contradicts",
    ),
    "test_count_bounds.py": ("test_property_no_count_above_the_distinct_traces_behind_it_for_any_operations",),
    "test_conflict.py": (
        "test_a_reworded_correction_never_reinforces_the_rule_it_corrects",
        "test_the_conflict_check_does_not_depend_on_which_text_is_the_new_one",
        "test_a_reworded_opposite_is_a_conflict_in_both_directions",
        "test_the_default_model_is_the_onnx_encoder_with_its_own_threshold",
        "test_a_rewording_with_a_condition_negation_or_ordinal_is_the_same_lesson",
        "test_a_better_supported_reworded_correction_supersedes_the_rule",
    ),
    "test_door_servers.py": ("test_the_doors_serve_tls_with_a_certificate",),
    "test_controller_plot.py": (
        "test_a_sync_fleets_controller_shows_round_times_with_rollouts",
        "test_the_plot_is_written_with_the_controllers_choice",
    ),
    "test_challenges.py": ("test_no_correction_reinforces_the_rule_it_corrects",),
    # property tests, simulations and scans that took 0.3 s of CPU or more (measured at load 20-30)
    "test_bad_records.py": (
        "test_every_stage_dead_letters_a_record_it_cannot_read_with_the_reason_and_goes_on",
        "test_the_readers_of_the_served_topics_skip_what_they_cannot_read_and_go_on",
    ),
    "test_client_late_records.py": (
        "test_a_follower_that_reads_again_where_it_is_told_ends_where_the_rule_on_the_log_does_and_never_goes_back",
        "test_a_client_started_with_a_cached_version_serves_no_older_one_from_a_log_read_with_a_hole",  # a 1 s pause
    ),
    "test_late_records_readers.py": (
        "test_a_reader_that_reads_again_where_it_is_told_takes_every_record_exactly_once",
    ),
    "test_concurrency.py": ("test_limit_stays_within_floor_and_ceiling_and_overload_never_raises",),
    "test_controller_decisions.py": ("test_decisions_are_always_valid_sizes",),
    "test_door_mcp.py": (
        "test_a_key_for_tenant_a_never_reads_nor_learns_of_tenant_b",
        "test_mcp_refuses_a_foreign_host_and_origin_even_with_a_key",
    ),
    "test_log_limit.py": ("test_lines_stand_for_every_occurrence_and_are_at_least_an_interval_apart",),
    "test_meaning.py": (
        "test_a_correction_never_increases_the_counters_of_the_rule_it_contradicts",
        "test_the_merge_by_meaning_does_not_depend_on_the_order_of_partials_or_operations",
    ),
    "test_otlp_assembler.py": ("test_any_batching_with_retries_gives_one_trace_per_run_and_settles_every_record_once",),
    "test_outcomes.py": ("test_the_version_does_not_depend_on_the_order_traces_or_partials_arrive_in",),
    "test_ownership_state.py": (
        "test_a_view_resumed_from_its_checkpoint_keeps_exactly_the_records_its_state_still_needs",
        "test_every_reader_keeps_numbers_0_1_2_in_log_order_and_nothing_else",
    ),
    "test_papercuts.py": (
        "test_diff_of_a_missing_archive_says_the_file_is_missing",
        "test_diff_of_a_tampered_archive_says_which_line_and_nothing_about_replaying",
        "test_replay_of_a_missing_archive_names_the_file_not_line_0",
    ),
    "test_paraphrase.py": ("test_property_lessons_naming_different_numbers_or_ids_are_never_merged",),
    "test_pipeline_state.py": ("test_a_restore_from_manifests_dedupes_exactly_like_the_live_batcher",),
    "test_playbook.py": ("test_deterministic_across_processes_and_hash_seeds",),
    "test_playbook_curation.py": (
        "test_property_deduplicate_preserves_counters",
        "test_property_operation_algebra",
        "test_property_render_respects_budget",
    ),
    "test_processor_batcher.py": (
        "test_every_reflection_settles_exactly_once_and_every_trace_is_in_exactly_one_batch",
    ),
    "test_promoter_pruning.py": (
        "test_a_pruning_promoter_emits_the_same_effects_as_one_that_keeps_everything",
        "test_after_500_versions_a_promoter_holds_only_what_its_next_decisions_rest_on",
    ),
    "test_prompt_limits.py": ("test_property_a_trace_payload_and_context_lines_never_exceed_their_caps",),
    "test_redaction.py": ("test_simulated_traces_pass_unchanged",),
    "test_redaction_corpus.py": (
        "test_a_generated_secret_or_personal_datum_never_survives",
        "test_every_lesson_the_simulator_can_write_passes_unchanged",
        "test_simulated_traces_pass_unchanged_with_the_library_detector",
    ),
    "test_review.py": ("test_agents_get_only_approved_or_edited_texts_and_a_resent_record_changes_nothing",),
    "test_scan.py": (
        "test_call_count_counts_merging_groups",
        "test_every_node_is_a_child_of_exactly_one_group",
        "test_no_group_exceeds_fan_in_and_groups_are_balanced",
        "test_one_level_when_the_leaves_fit_one_call",
        "test_single_root_at_the_depth_of_the_formula",
    ),
    "test_scopes.py": (
        "test_the_composed_text_is_within_the_budget_and_never_holds_a_parent_entry_while_a_childs_is_left_out",
    ),
    "test_shuffle.py": (
        "test_copies_of_an_item_spread_over_distinct_subgroups",
        "test_derive_seed_separates_its_inputs",
        "test_every_item_has_exactly_p_copies",
        "test_no_call_of_the_aggregation_reads_more_than_the_capacity",
        "test_no_subgroup_exceeds_max_fan_in",
        "test_plan_is_deterministic_for_a_seed",
        "test_subgroup_count_rule",
        "test_subgroups_are_balanced_within_one",
        "test_the_papers_k_is_kept_exactly_when_the_model_holds_its_calls",
    ),
    "test_sim_calls.py": (
        "test_a_worker_calling_a_provider_still_imports_litellm",
        "test_a_worker_on_the_simulator_never_imports_litellm",
        "test_in_process_answers_are_the_ones_litellm_gives",
        "test_a_modelled_latency_over_the_timeout_is_an_overload_both_ways",  # through litellm: its import
    ),
    "test_stream_parts.py": ("test_the_committed_offset_never_passes_an_unfinished_record",),
    "test_streaming.py": (
        "test_a_choice_within_bounds_keeps_up_or_says_it_cannot",
        "test_the_batch_grows_with_the_arrival_rate",
        "test_the_issue_stream_gets_a_batch_that_keeps_up",
    ),
    "test_topic_readers.py": (
        "test_only_the_topic_reader_and_the_stage_runtime_build_consumers",
        "test_only_the_topic_reader_calls_aiokafkas_private_client",
    ),
    "test_topology_declaration.py": ("test_no_module_names_a_topic_by_a_string_literal",),
    # a second interpreter runs the declaration's checks on a copy of the tree with a new stage: about 12 s of CPU
    "test_adding_a_stage.py": ("test_a_new_stage_is_one_core_package_one_binding_and_one_declaration_line",),
    "test_uncertain.py": (
        "test_after_a_reducer_call_a_correction_never_increases_the_counters_of_the_rule_it_contradicts",
        "test_no_verdict_depends_on_which_text_is_the_new_one",
    ),
    # measured again in the fast lane (2026-11-29, third session, load 30-50, where wall was 5-10 times CPU): 1.5-3 s
    # or more of wall there, about 0.3 s of CPU (property tests, a scan of every module, a page rendered per example)
    "test_review_inbox.py": ("test_every_accepted_reviewer_name_is_one_printable_line",),
    "test_chain_pacing.py": (
        "test_at_most_one_batch_waits_no_trace_is_lost_or_batched_twice_and_the_same_inputs_give_the_same_batches",
    ),
    "test_review_filter.py": ("test_the_page_lists_the_filtered_page_with_links_that_keep_the_filter",),
    "test_simulator_layering.py": (
        "test_no_production_module_but_the_listed_entry_points_imports_the_simulator",
    ),
    "test_demotion.py": ("test_property_only_measurably_worse_entries_go_and_never_more_than_the_cap",),
    "test_retention.py": ("test_what_goes_is_an_old_fully_read_prefix_and_never_the_end",),
    "test_system_classifier.py": (
        "test_instructions_about_the_reviewer_or_the_store_are_not_learned",
        "test_task_lessons_with_the_same_words_are_kept",
        "test_parsing_does_not_ask_the_learned_check",  # loads the learned check: 0.5-0.7 s (fourth session)
    ),
    "test_broker_faults.py": ("test_the_storage_url_reaches_the_tansu_command_line",),
    "test_aliases.py": (
        "test_through_the_reducer_a_naive_model_keeps_one_entry_and_the_alias_survives_a_restart",
        "test_no_add_raises_a_counter_except_through_the_entrys_own_text",
    ),
    "test_deploy_static.py": ("test_compose_commands_are_real_combee_commands_and_stages",),
    "test_call_guard.py": ("test_no_answer_raises_support_above_what_was_given_or_loses_a_lesson",),
    "test_demo_display.py": ("test_the_accuracy_plots_legend_never_covers_a_point_such_as_the_rejected_version",),
    # measured again in the fast lane (2026-11-29, fourth session, load 12-30), each test's own CPU: 0.3-3.5 s
    "test_held_out_bounds.py": ("*",),  # the reducer with the real encoder over the six held-out sets: 6.4 s in all
    "test_review_undo.py": ("test_a_log_with_undos_folds_as_the_log_without_the_undone_decisions",),  # 120 logs
    "test_suite_order.py": ("test_every_test_runs_once_in_any_order",),
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the listed tests ``slow`` before ``-m`` selects; a listed name its module lacks is an error."""
    checked: set[str] = set()
    for item in items:
        path = item.path
        if path.parent.name != "unit" or path.name not in SLOW:
            continue
        names = SLOW[path.name]
        if path.name not in checked:
            checked.add(path.name)
            module = getattr(item, "module", None)
            missing = [n for n in names if n != "*" and module is not None and not hasattr(module, n)]
            if missing:
                raise pytest.UsageError(f"tests/unit/conftest.py lists {missing} in {path.name}: no such test")
        function = getattr(item, "originalname", item.name)
        if "*" in names or function in names:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def fresh_import_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What a fresh interpreter imports and does (tests/unit/fresh_interpreter.py), gathered once per run: under
    pytest-xdist the first worker that asks runs it and the others read its file (each would pay ~10 s of CPU).
    Run without the ``LITELLM*`` variables of the environment (litellm's offline switch is the project's own)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's directory, above every worker's own
    facts = shared / "fresh_import_facts.json"
    with open(shared / "fresh_import_facts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not facts.exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith("LITELLM")}
            done = subprocess.run([sys.executable, "-m", "tests.unit.fresh_interpreter", str(facts)], cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
            assert done.returncode == 0, done.stdout + done.stderr
            report = json.loads(facts.read_text())
            report["stdout"] = done.stdout  # what the stages printed past their own capture (none is expected)
            facts.write_text(json.dumps(report, indent=1))
    result: dict[str, Any] = json.loads(facts.read_text())
    return result
