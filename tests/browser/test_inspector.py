"""The inspector in a real browser against a real `mnemo serve`: log in with a key, open
a session the worker compressed, read its last compression's diff, search a memory,
requeue a dead job; another tenant's session is not reachable by URL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import CHROMEDRIVER, CHROMIUM, NARROW, WIDE, Site, screenshot_dir

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)",
)

Driver = Any  # selenium's WebDriver; imported lazily so collection works without it


def by_css(driver: Driver, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def all_css(driver: Driver, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def wait_for_url(driver: Driver, part: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda d: part in d.current_url)


def wait_for(driver: Driver, css: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def snap(driver: Driver, name: str) -> None:
    folder = screenshot_dir()
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(folder / f"{name}.png"))


def log_in(driver: Driver, site: Site, key: str, *, refused: bool = False) -> None:
    driver.delete_all_cookies()
    driver.get(site.server.url + "/ui/sessions")
    assert by_css(driver, "h1").text == "Mnemo inspector"  # the login page, not the list
    by_css(driver, "#key").send_keys(key)
    by_css(driver, "form button[type=submit]").click()
    # The login page is served at the URL asked for; wait for the page that follows it.
    wait_for(driver, ".error" if refused else "form.logout")


def test_an_operator_follows_a_session_from_login_to_requeue(browser: Driver, site: Site) -> None:
    d = browser
    d.set_window_size(*WIDE)
    log_in(d, site, site.admin)
    assert d.current_url == site.server.url + "/ui/sessions"
    assert site.admin not in d.current_url and site.admin not in d.page_source
    # The cookie is out of reach of scripts on the page.
    assert d.execute_script("return document.cookie") == ""
    row = by_css(d, "tbody tr")
    assert "trip-1" in row.text and "traveller-7" in row.text
    snap(d, "sessions")

    by_css(d, "a[href='/ui/sessions/trip-1']").click()
    last = by_css(d, "#last")
    assert "manual" in last.text  # the trigger of the compression asked for
    kinds = {e.text for e in all_css(d, "#last .changes .badge")}
    assert "added" in kinds
    assert "book_hotel" in last.text  # the booking is in the state it added
    # Compacted turns are marked, the tool call is shown with its result.
    assert all_css(d, "li.turn.compacted")
    call = by_css(d, ".call")
    assert "book_hotel" in call.text and "HX-7731" in call.text
    # The context at another budget.
    budget = by_css(d, "#budget")
    budget.clear()
    budget.send_keys("400")
    budget.submit()
    wait_for_url(d, "budget=400")
    assert "Context at 400 tokens" in by_css(d, "#ctx-h").text
    d.execute_script("window.scrollTo(0, 0)")
    snap(d, "session")

    d.get(site.server.url + "/ui/users/traveller-7")
    search = by_css(d, "#q")
    search.send_keys("peanut")
    search.submit()
    wait_for_url(d, "q=peanut")
    best = by_css(d, "table.memories tbody tr")  # the best match first
    assert best.text.startswith("Allergic to peanuts.")
    d.get(site.server.url + "/ui/users/traveller-7")
    assert "喜欢安静的房间。" in by_css(d, "table.memories").text
    snap(d, "user")

    d.get(site.server.url + "/ui/queue")
    row = by_css(d, f"#job-{site.dead_job}")
    assert "legacy_reindex" in row.text and "no handler" in row.text
    snap(d, "queue")
    row.find_element("css selector", "button").click()
    wait_for_url(d, "note=")
    assert f"job {site.dead_job} requeued" in by_css(d, ".note").text


def test_another_tenant_reaches_nothing_by_url(browser: Driver, site: Site) -> None:
    d = browser
    log_in(d, site, site.other)
    assert "trip-1" not in by_css(d, "main").text
    for path in ("/ui/sessions/trip-1", "/ui/users/traveller-7"):
        d.get(site.server.url + path)
        assert by_css(d, "h1").text == "Not found"
        assert "HX-7731" not in d.page_source and "peanut" not in d.page_source
    # An agent key of the right tenant does not open the inspector either.
    log_in(d, site, site.agent, refused=True)
    assert "admin scope" in by_css(d, ".error").text


def test_keyboard_narrow_window_and_chinese(browser: Driver, site: Site) -> None:
    from selenium.webdriver.common.keys import Keys

    d = browser
    log_in(d, site, site.admin)
    d.get(site.server.url + "/ui/sessions/trip-1")
    # The first Tab reaches the skip link; Enter moves focus to the content.
    by_css(d, "body").send_keys(Keys.TAB)
    focused = d.switch_to.active_element
    assert focused.text == "Skip to content"
    focused.send_keys(Keys.ENTER)
    assert d.switch_to.active_element.get_attribute("id") == "main"
    # A CJK font is there, and the Chinese turn is laid out (not tofu boxes of zero width).
    assert d.execute_script("return document.fonts.check('16px \"Noto Sans CJK SC\"')")
    assert "我的护照号码" in by_css(d, "#timeline").text
    # Narrow: nothing wider than the window (tables scroll inside their own box).
    d.set_window_size(*NARROW)
    overflow = d.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    snap(d, "session-narrow")
    d.set_window_size(*WIDE)
