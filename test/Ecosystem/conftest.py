"""The ecosystem tier's selection: test_exports.py runs the checks of the
selected cases concurrently before the first test asks for one."""


def pytest_collection_modifyitems(session, config, items):
    import test_exports

    test_exports.SELECTED[:] = [item.name for item in items]
