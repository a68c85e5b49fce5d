"""The "browser" of `comotion authenticate` in the SDK tests (BROWSER names a
script that starts this in the background). It does what a person does: opens
the login page the CLI points at, fills in the username and password of
LAKEHOST_TEST_LOGIN ("user:password"), submits the form, and follows the
redirect to the CLI's loopback address, where the CLI exchanges the code.

Usage: login_browser.py URL. Standard library only.
"""

import html.parser
import http.client
import os
import ssl
import sys
import urllib.parse


class FormFields(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("type") == "hidden":
            self.fields[attrs["name"]] = attrs.get("value") or ""


def request(method, url, body=None):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname, parts.port, context=ssl.create_default_context()
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
    connection.request(method, target, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, response.getheader("Location"), response.read().decode()


def main():
    url = sys.argv[1]
    username, password = os.environ["LAKEHOST_TEST_LOGIN"].split(":", 1)
    status, _, page = request("GET", url)
    if status != 200:
        raise SystemExit(f"login page answered {status}: {page}")
    form = FormFields()
    form.feed(page)
    fields = dict(form.fields, username=username, password=password)
    # The form posts to the page's own address.
    status, location, page = request("POST", url, urllib.parse.urlencode(fields))
    if status not in (302, 303) or not location:
        raise SystemExit(f"login answered {status}: {page}")
    status, _, page = request("GET", location)
    print(f"redirect to the CLI answered {status}", file=sys.stderr)


if __name__ == "__main__":
    main()
