"""GPUs claimed through DRA: claims and templates judged where the information lives, and pods profiled from them.

Every denial message is asserted whole: they are what a user reads to fix a claim. The device classes are the
rules' (`dra:` in rules/default.yaml); the catalog's names are read from the rules, so a catalog change does not
break these tests, only a change of what the messages say.
"""

from __future__ import annotations

from tests.conftest import Server
from tests.support.dra import A100, MEM_40, PRODUCT_FIX, request, template
from tests.support.reviews import admission_review
from webhook.core.view.claims import CLAIM
from webhook.core.view.claims import CLAIM_TEMPLATE as TEMPLATE


def test_claim_reviews_through_the_server(server: Server, known: str) -> None:
    """No watch needed: a claim is judged from itself. v1 is what the API server sends (matchPolicy Equivalent)."""
    obj = template(request(count=2))
    review = admission_review(obj, group="resource.k8s.io", kind=TEMPLATE, resource="resourceclaimtemplates")
    answer = server.review("/validate", review)
    assert answer["allowed"] is False
    assert answer["status"]["message"].splitlines()[1] == (
        f'- request "gpu" (2 x gpu.nvidia.com) does not pin the GPU model: {PRODUCT_FIX.format(known=known)}')
    good = template(request(A100, MEM_40, count=2))
    review = admission_review(good, group="resource.k8s.io", kind=TEMPLATE, resource="resourceclaimtemplates")
    assert server.review("/validate", review) == {"uid": review["request"]["uid"], "allowed": True}
    status = admission_review(obj, group="resource.k8s.io", kind=CLAIM, resource="resourceclaims",
                              operation="UPDATE", old=obj, sub_resource="status")
    assert server.review("/validate", status)["allowed"] is True
