import pytest

from combee_core.settings import CombeeSettings, SettingsError


def test_environment_then_overrides():
    env = {"COMBEE_BATCH_SIZE": "12", "COMBEE_TOPIC_PREFIX": "x.", "COMBEE_KAFKA_BOOTSTRAP": ""}
    settings = CombeeSettings.load(env, topic_prefix="y.")
    assert settings.batch_size == 12
    assert settings.topic_prefix == "y."
    assert settings.kafka_bootstrap is None
    assert settings.topic("traces") == "y.traces"


def test_bad_value_names_the_variable():
    with pytest.raises(SettingsError, match="COMBEE_BATCH_SIZE"):
        CombeeSettings.load({"COMBEE_BATCH_SIZE": "zero"})


def test_the_renamed_delete_cap_is_an_error_naming_the_change_cap_not_silently_ignored():
    import pytest as _pytest

    from combee_core.settings import CombeeSettings, SettingsError

    with _pytest.raises(SettingsError, match="COMBEE_PLAYBOOK_CHANGE_CAP"):
        CombeeSettings.load({"COMBEE_PLAYBOOK_DELETE_CAP": "0.5"})
    assert CombeeSettings.load({"COMBEE_PLAYBOOK_CHANGE_CAP": "0.5"}).playbook_change_cap == 0.5
