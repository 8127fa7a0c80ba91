"""The metadata service's ACL routes (`/v1/acls/*`), one APIRouter that `metadata.app`
includes. Kafka ACL bindings and their version (metadata.acls):

- `GET /v1/acls/version` -> `{"version"}`: the cheap read agents poll;
- `GET /v1/acls` -> `{"version", "bindings"}`: everything, consistent with the version;
- `POST /v1/acls/describe` `{"filter"}` -> `{"version", "bindings"}` matching the filter;
- `POST /v1/acls/create` `{"bindings"}` -> `{"version"}` after (present ones are kept);
- `POST /v1/acls/delete` `{"filters"}` -> `{"version", "matched"}`: per filter, what it
  matched and so deleted.

Enums are Kafka's integer codes. Invalid bindings or filters: 400 INVALID_REQUEST, and
nothing changes. Who may call these (an operator or an agent, not any client) is the
metadata service's authentication's business; they change who may do what on the Kafka
listener, so they belong with the admin routes.
"""

from __future__ import annotations

from fastapi import APIRouter
from skiff.metadata import acl_serde as m
from skiff.metadata.auth import AGENT, allow
from skiff.metadata.service import MetadataService


def acl_router(svc: MetadataService) -> APIRouter:
    # Agents read the bindings (to authorize every request) and change them for Kafka's
    # CreateAcls/DeleteAcls, which the agent's own ACLs guard (ALTER on CLUSTER).
    router = APIRouter(prefix="/v1/acls", tags=["acls"], dependencies=[allow(AGENT)])

    @router.get("/version", response_model=m.AclVersionM)
    def acl_version() -> m.AclVersionM:
        return m.AclVersionM(version=svc.acl_version())

    @router.get("", response_model=m.AclBindingsM)
    def list_acls() -> m.AclBindingsM:
        version, bindings = svc.list_acls()
        return m.AclBindingsM.model_construct(version=version, bindings=[m.binding_to_m(b) for b in bindings])

    @router.post("/describe", response_model=m.AclBindingsM)
    def describe_acls(req: m.DescribeAclsRequest) -> m.AclBindingsM:
        version, bindings = svc.describe_acls(m.filter_from_m(req.filter))
        return m.AclBindingsM.model_construct(version=version, bindings=[m.binding_to_m(b) for b in bindings])

    @router.post("/create", response_model=m.AclVersionM)
    def create_acls(req: m.CreateAclsRequest) -> m.AclVersionM:
        return m.AclVersionM(version=svc.create_acls([m.binding_from_m(b) for b in req.bindings]))

    @router.post("/delete", response_model=m.DeletedAclsM)
    def delete_acls(req: m.DeleteAclsRequest) -> m.DeletedAclsM:
        version, matched = svc.delete_acls([m.filter_from_m(f) for f in req.filters])
        return m.DeletedAclsM.model_construct(
            version=version, matched=[[m.binding_to_m(b) for b in per] for per in matched]
        )

    return router
