"""What submit refuses and accepts that other commands read alike: --gpu-type alternatives, --after's
array elements in brackets as queue prints them, and the fields a --from line may have."""

from __future__ import annotations

import pytest

from dispatcher.core.arrays import request_jobs
from dispatcher.core.errors import InvalidRequestError
from dispatcher.core.fields import parse_job_ids
from dispatcher.core.spec import parse_gpu_types, spec_from_request


@pytest.mark.parametrize("text", ["A100||", "|A100", "A100,,H100"], ids=["trailing", "leading", "comma"])
def test_a_gpu_type_with_an_empty_alternative_is_refused_as_an_empty_one_is(text):
    with pytest.raises(InvalidRequestError) as e:
        parse_gpu_types(text)
    assert e.value.field == "--gpu-type"


def test_after_takes_an_arrays_elements_in_brackets_as_cancel_does():
    assert parse_job_ids("119_[0-1],7", "--after") == ("119_0", "119_1", "7")
    assert parse_job_ids(["119_[0,2]"], "--after") == ("119_0", "119_2")
    with pytest.raises(InvalidRequestError):
        parse_job_ids("12,", "--after")  # an empty id is still a mistake


def test_an_unknown_field_names_array_among_the_known_ones():
    def build(request):
        return spec_from_request(request, user="ann", submit_ms=1, cwd="/")

    with pytest.raises(InvalidRequestError) as e:
        request_jobs({"command": ["true"], "bogus": 1}, build, "0")
    assert e.value.field == "bogus" and ", array" in str(e.value), str(e.value)
