"""Download the dataset once (frozen: part of the evaluation setup)."""

import urllib.request

URL = "https://example.org/tinyshakespeare/input.txt"


def main():
    urllib.request.urlretrieve(URL, "input.txt")


if __name__ == "__main__":
    main()
