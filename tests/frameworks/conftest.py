from test_frameworks import TIMES


def pytest_terminal_summary(terminalreporter):
    if not TIMES:
        return
    terminalreporter.section("frameworks: wall time of each run, seconds (launch to exit)")
    terminalreporter.write_line(f"{'framework':<20} {'hier':>7} {'gloo':>7}")
    for job, times in TIMES.items():
        cells = "".join(f" {times[b]:>7.1f}" if b in times else f" {'-':>7}" for b in ("hier", "gloo"))
        terminalreporter.write_line(f"{job:<20}{cells}")
