"""Signing in and out, and each person's API tokens."""

from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from teams.models import ApiToken


class LoginForm(AuthenticationForm):
    # One message for a wrong username and a wrong password alike: never tell which half was wrong.
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": _("Wrong username or password."),
    }


class LoginView(auth_views.LoginView):
    form_class = LoginForm
    template_name = "teams/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass


class TokenForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, help_text=_("What the token is for, e.g. 'laptop CLI'."))
    expires_at = forms.DateTimeField(label=_("Expires"), required=False, help_text=_("Optional, e.g. 2027-01-31 18:00."))

    def clean_expires_at(self):
        value = self.cleaned_data["expires_at"]
        if value is not None and value <= timezone.now():
            raise forms.ValidationError(_("An expiry must be in the future."))
        return value


@login_required
def token_list(request):
    """A person's API tokens: create (the token is shown once) and revoke."""
    new_token = None
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        _token, new_token = ApiToken.issue(
            user=request.user, name=form.cleaned_data["name"], expires_at=form.cleaned_data["expires_at"]
        )
        form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    return render(request, "teams/token_list.html", {"form": form, "tokens": tokens, "new_token": new_token})


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(ApiToken.objects.filter(user=request.user), pk=pk)
    token.revoke()
    messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("teams:token-list")
