"""The site's links to other hosts, each asked once: the weekly job of
.github/workflows/site-links.yml (`make site` checks the links within the site on every push).

    python -m tools.site_links site/

Every <a href> to http(s) in the built site is asked for, without its #fragment, by HEAD (GET
where a server refuses HEAD), a few at a time; a server that asks to slow down (429) is asked
again once. Each link that fails is printed with its status or error and the pages holding it;
the exit status is 1 if any failed.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

from tools.site_build import read_page

TIMEOUT_SECONDS = 20
AT_ONCE = 8
AGENT = "memorybook-site-links (a weekly check of a documentation site's links)"


def external_links(site: Path) -> dict[str, list[str]]:
    """Each address (no fragment) the site links to on another host -> the pages linking it."""
    found: dict[str, list[str]] = {}
    for page in sorted(site.rglob("*.html")):
        for tag, _, value in read_page(page).refs:
            if tag == "a" and urlsplit(value).scheme in ("http", "https"):
                pages = found.setdefault(urldefrag(value.strip())[0], [])
                name = page.relative_to(site).as_posix()
                if name not in pages:
                    pages.append(name)
    return found


def ask(url: str, method: str = "HEAD") -> int | str:
    """The status the address answers with, or why it gave none."""
    request = urllib.request.Request(url, method=method, headers={"User-Agent": AGENT})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return response.status
    except urllib.error.HTTPError as error:
        if method == "HEAD" and error.code in (403, 404, 405, 501):  # some refuse HEAD alone
            return ask(url, "GET")
        return error.code
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        return str(getattr(error, "reason", error))


def checked(url: str) -> int | str:
    answer = ask(url)
    if answer == 429:
        time.sleep(10)
        answer = ask(url)
    return answer


def broken_links(site: Path) -> list[str]:
    links = external_links(site)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        answers = dict(zip(links, pool.map(checked, links), strict=True))
    return [f"{url}: {answer} (on {', '.join(links[url])})"
            for url, answer in answers.items() if not (isinstance(answer, int) and answer < 400)]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    site = Path(argv[0])
    broken = broken_links(site)
    print(f"{len(external_links(site))} addresses on other hosts, {len(broken)} failed")
    for line in broken:
        print(f"  {line}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
